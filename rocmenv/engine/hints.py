"""Why an engine does not answer, and what to do about it: one hint per cause.

The adapters pass on what they saw — the socket error's text (docker-api, either transport)
or the CLI's stderr (docker-cli, podman) — and :func:`unreachable_hint` names the remedy:

* a CLI context that does not exist (``DOCKER_CONTEXT=nosuch``): list or reset contexts;
* permission denied on the socket: the ``docker`` group, root, or a rootless engine;
* a socket nobody listens on (connection refused: a stopped or crashed daemon): start it,
  and ask the journal why it stopped;
* no socket at all, or anything else: start the engine (:data:`START_HINT`).

Remote hosts (``tcp://``, ``ssh://``) fail in their own ways and get their own errors where
they are opened.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from rocmenv.engine.select import START_HINT
from rocmenv.lazy import Pattern

CONTEXT_HINT = (
    "the docker CLI context {name} does not exist: `docker context ls` lists them; unset "
    "DOCKER_CONTEXT, or `docker context use default`"
)
PERMISSION_HINT = (
    "you may not use the engine's socket{where}: add your user to the `docker` group "
    "(`sudo usermod -aG docker $USER`, then log in again), run as root, or use a rootless "
    "engine (DOCKER_HOST=unix:///run/user/$(id -u)/docker.sock)"
)
REFUSED_HINT = (
    "the socket{where} exists but nothing listens on it: the daemon is stopped or crashed — "
    "`sudo systemctl start docker` (`journalctl -u docker` says why it stopped), or point "
    "DOCKER_HOST at the socket of a running engine"
)
_CLI_CANNOT_CONNECT = Pattern(r"Cannot connect to the Docker daemon at unix://(\S+?)\.? ")


def unreachable_hint(text: str, env: Mapping[str, str]) -> str:
    """The hint for an engine that could not be reached, from what the adapter saw."""
    low = text.lower()
    if "context" in low and ("not found" in low or "does not exist" in low):
        name = env.get("DOCKER_CONTEXT") or "in use"
        return CONTEXT_HINT.format(name=repr(name) if env.get("DOCKER_CONTEXT") else name)
    path = _socket_in(text)
    where = f" {path}" if path else ""
    if "permission denied" in low:
        return PERMISSION_HINT.format(where=where)
    if "connection refused" in low:
        return REFUSED_HINT.format(where=where)
    cli = _CLI_CANNOT_CONNECT.search(text)  # the docker CLI says this for either case
    if cli is not None and os.path.exists(cli.group(1)):
        return REFUSED_HINT.format(where=f" {cli.group(1)}")
    return START_HINT


def cli_unreachable(text: str) -> bool:
    """The CLI's stderr says it could not reach its engine (not that the engine refused)."""
    low = text.lower()
    return (
        "cannot connect to the docker daemon" in low
        or "is the docker daemon running" in low
        or "permission denied while trying to connect" in low
        or "unable to resolve docker endpoint" in low
        or ("context" in low and "not found" in low)
    )


def _socket_in(text: str) -> str | None:
    found = re.search(r"unix://(/[^\s\"':]+)", text) or re.search(r"(/\S+\.sock)\b", text)
    return found.group(1).rstrip(".") if found else None
