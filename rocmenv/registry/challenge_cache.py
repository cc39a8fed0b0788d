"""Registries' bearer challenges kept between commands, so a command whose token is not cached
can ask the token server while its first request is still on the way.

One file next to the token cache and apart from it,
``$XDG_CACHE_HOME/rocmenv/registry-challenges.json`` (``~/.cache`` by default), mode 0600,
written atomically: per registry host, the ``realm`` and ``service`` of the last ``Bearer``
challenge answered **anonymously** — never a token, a credential or a scope. What is read back
is only a hint: :mod:`rocmenv.registry.auth` checks a remembered realm exactly as a fresh
challenge's (scheme, host rules), never sends credentials to it (hosts with credentials do not
use it at all), and uses a token fetched from it only when the registry's own 401 names the
same realm, service and scope. Off with the token cache (``ROCMENV_TOKEN_CACHE=0``, untrusted
mode). A missing, unreadable, oversized or malformed file is an empty cache, never an error.
:class:`AskAhead` is the token request a remembered challenge allows, on its thread.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from rocmenv.errors import RocmenvError
from rocmenv.hostfs import write_atomic

if TYPE_CHECKING:
    from rocmenv.registry.response import Response

VERSION = 1
MAX_ENTRIES = 256
#: the largest file read (an entry is ~150 bytes)
MAX_FILE = 256 * 1024
#: the longest realm or service kept (a real one is under 100 characters)
MAX_FIELD = 1024


def challenge_path(token_cache: Path) -> Path:
    """The challenge file beside the token cache file ``token_cache``."""
    return token_cache.with_name("registry-challenges.json")


class ChallengeCache:
    """Registry host → (realm, service), read once, written when it changes; thread-safe."""

    def __init__(self, path: Path, *, within: Path | None = None) -> None:
        self.path = path
        self.within = within  # the checkout: written without following links in it
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[str, str]] | None = None

    def _load(self) -> dict[str, tuple[str, str]]:
        if self._entries is not None:
            return self._entries
        entries: dict[str, tuple[str, str]] = {}
        try:
            with self.path.open("rb") as fh:
                raw = fh.read(MAX_FILE + 1)
            data = json.loads(raw) if len(raw) <= MAX_FILE else None
            if isinstance(data, dict) and data.get("version") == VERSION:
                for host, value in (data.get("challenges") or {}).items():
                    if len(entries) >= MAX_ENTRIES:
                        break
                    pair = _pair(value)
                    if pair is not None and isinstance(host, str):
                        entries[host] = pair
        except (OSError, ValueError, UnicodeDecodeError, AttributeError):
            entries = {}
        self._entries = entries
        return entries

    def get(self, host: str) -> tuple[str, str] | None:
        """The realm and service ``host`` sent last time (unchecked: a hint)."""
        with self._lock:
            return self._load().get(host)

    def put(self, host: str, realm: str, service: str) -> None:
        with self._lock:
            entries = self._load()
            if entries.get(host) == (realm, service):
                return
            entries[host] = (realm, service)
            self._write(entries)

    def drop(self, host: str) -> None:
        with self._lock:
            entries = self._load()
            if entries.pop(host, None) is not None:
                self._write(entries)

    def _write(self, entries: dict[str, tuple[str, str]]) -> None:
        keep = dict(sorted(entries.items())[:MAX_ENTRIES])
        payload = {
            "version": VERSION,
            "challenges": {h: {"realm": r, "service": s} for h, (r, s) in keep.items()},
        }
        with contextlib.suppress(OSError, ValueError):  # a cache that cannot be written
            write_atomic(  # is only slower
                self.path, json.dumps(payload, sort_keys=True), within=self.within,
                mode=0o600, durable=False, parents=True, dir_mode=0o700,
            )  # fmt: skip


def _pair(value: object) -> tuple[str, str] | None:
    if not isinstance(value, Mapping):
        return None
    realm, service = value.get("realm"), value.get("service")
    if not (isinstance(realm, str) and isinstance(service, str)):
        return None
    if not realm or len(realm) > MAX_FIELD or len(service) > MAX_FIELD:
        return None
    return realm, service


class AskAhead:
    """The token request a remembered challenge allows, on a daemon thread
    (:meth:`rocmenv.registry.auth.RegistryAuth.fetch_ahead`), made exactly as the 401's
    would be: its answer or its :class:`RocmenvError` is that request's (retried as that one
    would be, not a second time); anything else only a missed chance."""

    def __init__(self, request: Callable[[], Response]) -> None:
        self._request = request
        self._done = threading.Event()
        self._response: Response | None = None
        self._error: RocmenvError | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, name="rocmenv-token-ahead", daemon=True).start()

    def _run(self) -> None:
        try:
            self._response = self._request()
        except RocmenvError as err:  # the registry's or the realm's failure: told when taken
            self._error = err
        except Exception:  # asked again, in the ordinary way
            self._response = None
        finally:
            self._done.set()

    def result(self, timeout: float) -> Response | None:
        """The answer once the request ends (within ``timeout``; else None), or its error."""
        if self._done.wait(max(0.0, timeout)) and self._error is not None:
            raise self._error
        return self._response
