"""Anonymous bearer tokens kept between commands, so a second ``resolve``/``tags list``/``drift``
within a token's life skips the token round trip.

One file, ``$XDG_CACHE_HOME/rocmenv/registry-tokens.json`` (``~/.cache`` by default), mode
0600, written atomically; entries keyed by (realm, service, scope) and dropped at their
``expires_in`` (less a 10 s margin). Only tokens obtained **without** credentials are ever
stored. Which realm a registry sent us to is kept apart, in
:mod:`rocmenv.registry.challenge_cache`. ``ROCMENV_TOKEN_CACHE=0`` turns both off. A missing,
unreadable or malformed file is an empty cache, never an error.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from rocmenv.hostfs import write_atomic
from rocmenv.redact import register_secret

VERSION = 1
MARGIN = 10.0
MAX_ENTRIES = 256


def cache_path(env: Mapping[str, str]) -> Path | None:
    if env.get("ROCMENV_TOKEN_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "rocmenv" / "registry-tokens.json"


class TokenCache:
    def __init__(
        self, path: Path, clock: Callable[[], float] = time.time, *, within: Path | None = None
    ) -> None:
        self.path = path
        self.within = within  # the checkout: written without following links in it
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[str, float]] | None = None
        self.hits = 0

    @staticmethod
    def _key(key: tuple[str, str, str]) -> str:
        return "\x1f".join(key)

    def _load(self) -> dict[str, tuple[str, float]]:
        if self._entries is not None:
            return self._entries
        entries: dict[str, tuple[str, float]] = {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("version") == VERSION:
                now = self._clock()
                for k, v in (data.get("tokens") or {}).items():
                    if (
                        isinstance(v, dict)
                        and isinstance(v.get("token"), str)
                        and isinstance(v.get("expires"), (int, float))
                        and v["expires"] > now
                    ):
                        entries[k] = (v["token"], float(v["expires"]))
                        register_secret(v["token"])
        except (OSError, ValueError, UnicodeDecodeError):
            pass
        self._entries = entries
        return entries

    def get(self, key: tuple[str, str, str]) -> str | None:
        with self._lock:
            hit = self._load().get(self._key(key))
            if hit is None or hit[1] - MARGIN <= self._clock():
                return None
            self.hits += 1
            return hit[0]

    def put(self, key: tuple[str, str, str], token: str, expires_in: float) -> None:
        with self._lock:
            entries = self._load()
            now = self._clock()
            entries[self._key(key)] = (token, now + expires_in)
            live = {k: v for k, v in entries.items() if v[1] > now}
            keep = dict(sorted(live.items(), key=lambda kv: -kv[1][1])[:MAX_ENTRIES])
            self._entries = keep
            payload = {
                "version": VERSION,
                "tokens": {k: {"token": t, "expires": e} for k, (t, e) in sorted(keep.items())},
            }
            with contextlib.suppress(OSError, ValueError):  # a cache that cannot be written
                write_atomic(  # is only slower
                    self.path, json.dumps(payload, sort_keys=True), within=self.within,
                    mode=0o600, durable=False, parents=True, dir_mode=0o700,
                )  # fmt: skip
