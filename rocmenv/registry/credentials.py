"""Stored registry logins: podman's and skopeo's ``auth.json``, Docker's ``config.json`` and
Docker credential helpers, read with the standard library.

Where (:func:`credential_files`): ``REGISTRY_AUTH_FILE``, ``$XDG_RUNTIME_DIR/containers/
auth.json`` (where ``podman login`` writes), ``$XDG_CONFIG_HOME/containers/auth.json``, then
``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``; the first file that has a login
for the host contacted answers (:func:`find_login`). In a file, as docker-py's ``docker.auth``
and the Docker CLI read it: a ``credHelpers`` entry for the host, else the ``credsStore``,
names a helper, asked first (Docker Hub as ``https://index.docker.io/v1/``); what it does not
know, the ``auths`` entries may (``auth``: base64 ``user:password``; ``identitytoken``),
matched by the host, or by the host of a URL key (``https://index.docker.io/v1/`` is Docker
Hub's ``docker.io``). podman's namespace logins (``quay.io/org``) are not widened to the host.
A helper runs only for a file that names one for the host (or a ``credsStore``):
``docker-credential-NAME get`` with the server on stdin and JSON (``Username``, ``Secret``)
on stdout, found on the command's ``PATH`` and run with its environment, within
:data:`HELPER_TIMEOUT` (or the command's deadline) and :data:`MAX_HELPER_OUTPUT`; what it
says on failure is redacted. Every secret read is registered with :mod:`rocmenv.redact`.

Why not docker-py's ``docker.auth`` (rule 11): it did the same reading, but importing it
imports docker-py (requests, its adapters, websocket-client, paramiko's hooks): 161–186 ms
added to every registry command on a machine with any Docker config — every CI runner after
``docker/login-action``, every workstation after ``docker login`` — before it knew whether
the file named the host (``benchmarks/bench_registry_tls.py``, which writes such a config;
the CHANGELOG has the figures). The format and the helper protocol are small and stable; the
same conformance tests pass: ``tests/unit/registry/test_auth.py`` and
``test_credentials.py`` (entries, Hub names, helpers, malformed files and answers, a helper
that hangs or floods), ``tests/integration/registry/test_credential_helpers.py`` and
``test_podman_credentials.py`` (real helpers and real ``podman login`` against the token-auth
registry on loopback).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from rocmenv.errors import RegistryAuthError
from rocmenv.redact import redact, register_secret
from rocmenv.registry.manifest import DOCKER_HUB, DOCKER_HUB_API

IDENTITY_TOKEN = "<token>"
HUB_HOSTS = frozenset({DOCKER_HUB_API, "index.docker.io", DOCKER_HUB})
#: Docker Hub's name for helpers (docker-py's ``INDEX_URL``, the Docker CLI's ``IndexServer``).
HUB_SERVER = "https://index.docker.io/v1/"
#: The largest credentials file read (a real one is a few kilobytes).
MAX_AUTH_FILE = 4 << 20
#: How long a credential helper may take (a keychain may ask to unlock), and how much it may say.
HELPER_TIMEOUT = 60.0
MAX_HELPER_OUTPUT = 1 << 20
_NOT_FOUND = "credentials not found in native keychain"


class LoginFileError(Exception):
    """What is wrong with a login file or its helper (no secret in it)."""


def credential_files(env: Mapping[str, str]) -> list[tuple[Path, str]]:
    """Where logins are kept, in the order they are consulted (``containers-auth.json(5)``,
    then Docker's): ``REGISTRY_AUTH_FILE``; ``$XDG_RUNTIME_DIR/containers/auth.json`` (where
    ``podman login`` writes); ``$XDG_CONFIG_HOME/containers/auth.json`` (default
    ``~/.config``); ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``. The first
    file with an entry (or a helper) for the host contacted answers."""
    home = env.get("HOME") or str(Path.home())
    files: list[tuple[Path, str]] = []
    if env.get("REGISTRY_AUTH_FILE"):
        files.append((Path(env["REGISTRY_AUTH_FILE"]), "containers"))
    if env.get("XDG_RUNTIME_DIR"):
        files.append((Path(env["XDG_RUNTIME_DIR"]) / "containers" / "auth.json", "containers"))
    config_home = env.get("XDG_CONFIG_HOME") or str(Path(home) / ".config")
    files.append((Path(config_home) / "containers" / "auth.json", "containers"))
    docker_dir = env.get("DOCKER_CONFIG") or str(Path(home) / ".docker")
    files.append((Path(docker_dir) / "config.json", "docker"))
    return files


def host_entries(raw: dict[str, object]) -> dict[str, object]:
    """An auth.json's entries for whole hosts only: podman also keeps logins for one
    namespace (``quay.io/org``), which a per-host reading would widen to the whole host."""
    auths = raw.get("auths")
    if isinstance(auths, dict):

        def whole_host(key: str) -> bool:
            bare = key.split("://", 1)[-1]
            return "/" not in bare.rstrip("/") or bare.startswith("index.docker.io/v1")

        raw = {**raw, "auths": {k: v for k, v in auths.items() if whole_host(str(k))}}
    return raw


def secret_pair(entry: Mapping[str, object]) -> tuple[str, str] | None:
    """``(user, password)`` or ``("<token>", identity token)`` of a login entry, each secret
    registered for redaction."""
    username = entry.get("Username") or entry.get("username")
    password = entry.get("Password") or entry.get("password")
    token = entry.get("IdentityToken") or entry.get("identitytoken")
    register_secret(str(password) if password else None)
    register_secret(str(token) if token else None)
    if token:
        return (IDENTITY_TOKEN, str(token))
    if username and password:
        return (str(username), str(password))
    return None


def _index_name(key: str) -> str:
    """The host a login key names (docker-py's ``resolve_index_name``): scheme and path
    dropped, ``index.docker.io`` as ``docker.io``."""
    bare = key.replace("http://", "").replace("https://", "").split("/", 1)[0]
    return DOCKER_HUB if bare == f"index.{DOCKER_HUB}" else bare


def _auths_entry(auths: Mapping[str, object], lookup: str) -> dict[str, str] | None:
    """The ``auths`` entry for ``lookup`` as a login: the exact key, else the first key naming
    that host."""
    key = lookup if lookup in auths else next((k for k in auths if _index_name(k) == lookup), None)
    if key is None:
        return None
    entry = auths[key]
    if not isinstance(entry, dict):
        raise LoginFileError(f"the entry for {key!r} is not an object")
    if "identitytoken" in entry:  # the rest of the entry is then ignored, as Docker does
        return {"IdentityToken": str(entry["identitytoken"] or "")}
    if "auth" not in entry:
        return {}  # a login kept by a credential helper: nothing here
    try:
        user, colon, password = base64.b64decode(str(entry["auth"])).partition(b":")
        if not colon:
            raise ValueError("no ':' between user and password")
        return {"Username": user.decode(), "Password": password.decode()}
    except (binascii.Error, ValueError) as err:  # UnicodeDecodeError is a ValueError
        raise LoginFileError(f"the entry for {key!r} has an unreadable auth ({err})") from None


def find_login(
    host: str, env: Mapping[str, str], *, timeout: float = HELPER_TIMEOUT
) -> tuple[str, str] | None:
    """The first login for ``host`` in :func:`credential_files`, as :func:`secret_pair`;
    :class:`~rocmenv.errors.RegistryAuthError` naming the file for a broken one."""
    lookup = DOCKER_HUB if host in HUB_HOSTS else host
    for path, kind in credential_files(env):
        try:
            if not path.is_file():
                continue
        except (OSError, ValueError):
            continue
        try:
            entry = _login_in(path, kind, lookup, env, timeout)
        except (OSError, ValueError, LoginFileError) as err:
            raise RegistryAuthError(
                f"cannot read credentials for {host} from {path}: {redact(str(err))}",
                hint="fix the Docker config (or its credential helper), or run `docker login`"
                if kind == "docker"
                else f"fix {path} (podman/skopeo's auth.json), or run `podman login`",
            ) from None
        if entry:
            return secret_pair(entry)
    return None


def _login_in(
    path: Path, kind: str, lookup: str, env: Mapping[str, str], timeout: float
) -> dict[str, str] | None:
    with path.open("rb") as handle:
        raw = json.loads(handle.read(MAX_AUTH_FILE))
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if kind == "containers":
        raw = host_entries(raw)
    auths, store, helpers = raw.get("auths"), raw.get("credsStore"), raw.get("credHelpers")
    if not {"auths", "credsStore", "credHelpers"} & raw.keys():  # legacy: all of it is logins
        auths = raw if all(isinstance(v, dict) for v in raw.values()) else {}
    if auths and not isinstance(auths, dict):
        raise LoginFileError("'auths' is not an object")
    server = HUB_SERVER if lookup == DOCKER_HUB else lookup
    helper = helpers.get(server) if isinstance(helpers, dict) else None
    helper = helper or store
    if helper:
        if not isinstance(helper, str):
            raise LoginFileError(f"the credential helper {helper!r} is not a name")
        found = ask_helper(helper, server, env, timeout=timeout)
        if found is not None:
            return found
    return _auths_entry(auths or {}, lookup)


def ask_helper(
    name: str, server: str, env: Mapping[str, str], *, timeout: float = HELPER_TIMEOUT
) -> dict[str, str] | None:
    """``docker-credential-NAME get`` for ``server``: a login entry, or None when the helper
    has none (its "credentials not found", or an empty answer as docker-credential-pass
    gives)."""
    import shutil

    program = f"docker-credential-{name}"
    exe = shutil.which(program, path=env.get("PATH"))
    if exe is None:
        raise LoginFileError(f"{program} (its credential helper) is not on PATH")
    code, out, err = _run(exe, server.encode(), {**os.environ, **env}, timeout)
    if code != 0:
        said = (out + err).decode("utf-8", "replace")
        if _NOT_FOUND in said:
            return None
        raise LoginFileError(f"{program} get failed ({code}): {redact(said.strip()[:300])}")
    try:
        answer = json.loads(out)
        user, secret = answer["Username"], answer["Secret"]
        if not isinstance(user, str) or not isinstance(secret, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise LoginFileError(f"{program} get answered something other than a login") from None
    register_secret(secret or None)
    if not user and not secret:
        return None
    if user == IDENTITY_TOKEN:
        return {"IdentityToken": secret}
    return {"Username": user, "Password": secret}


def _run(exe: str, data: bytes, env: dict[str, str], timeout: float) -> tuple[int, bytes, bytes]:
    """``exe get`` with ``data`` on stdin: exit code, stdout, stderr — each at most
    :data:`MAX_HELPER_OUTPUT`, all within ``timeout`` (else killed, :class:`LoginFileError`)."""
    import selectors
    import subprocess
    import time

    name = Path(exe).name
    try:
        proc = subprocess.Popen(
            [exe, "get"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env, close_fds=True,
        )  # fmt: skip
    except OSError as err:
        raise LoginFileError(f"{name} cannot be run: {err.strerror}") from None
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it did not read the server: its answer will say so
        pipes: tuple[IO[bytes], IO[bytes]] = (proc.stdout, proc.stderr)
        outputs = {pipe.fileno(): bytearray() for pipe in pipes}
        with selectors.DefaultSelector() as selector:
            for pipe in pipes:
                selector.register(pipe, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LoginFileError(f"{name} get gave no answer in {timeout:g} s")
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    buffer = outputs[key.fd]
                    buffer += chunk
                    if len(buffer) > MAX_HELPER_OUTPUT:
                        raise LoginFileError(f"{name} get said more than {MAX_HELPER_OUTPUT} bytes")
        try:
            code = proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise LoginFileError(f"{name} get did not end in {timeout:g} s") from None
        return code, bytes(outputs[pipes[0].fileno()]), bytes(outputs[pipes[1].fileno()])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
