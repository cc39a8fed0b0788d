"""The registry client's transport: keep-alive connections, retries, backoff, Retry-After.

Every HTTP round trip goes through :meth:`Transport.send` and is counted in
:class:`RegistryStats`; :meth:`Transport.send_with_retries` retries 429/5xx answers and
connection failures with exponential backoff (honouring ``Retry-After``).
"""

from __future__ import annotations

import random
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocmenv.config import RegistrySettings
from rocmenv.errors import RegistryUnavailable
from rocmenv.redact import redact
from rocmenv.reference import is_loopback_host
from rocmenv.registry.connection import Connection, StaleConnection, TransportError

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 120.0
USER_AGENT = "rocmenv (+https://github.com/rocmenv)"


@dataclass(frozen=True, kw_only=True)
class Response:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    url: str

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass
class RegistryStats:
    """HTTP round trips made, by kind (``tags``, ``manifest-head``, ``token``, …)."""

    by_kind: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str) -> None:
        with self._lock:
            self.by_kind[kind] += 1

    @property
    def requests(self) -> int:
        return sum(self.by_kind.values())


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    import email.utils  # only for the rare HTTP-date form

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Connections:
    """Keep-alive connections, one per (thread, scheme, host)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._local = threading.local()
        self._ssl: Any = None

    def _pool(self) -> dict[tuple[str, str], Connection]:
        pool: dict[tuple[str, str], Connection] = self._local.__dict__.setdefault("pool", {})
        return pool

    def get(self, scheme: str, host: str) -> Connection:
        pool = self._pool()
        conn = pool.get((scheme, host))
        if conn is None:
            if scheme == "https" and self._ssl is None:
                import ssl  # only for HTTPS registries: ~5 ms

                self._ssl = ssl.create_default_context()
            conn = Connection(scheme, host, self.timeout, self._ssl)
            pool[(scheme, host)] = conn
        return conn

    def close(self) -> None:
        pool = self._pool()
        for conn in pool.values():
            conn.close()
        pool.clear()


class _Transient(Exception):
    """A failure worth retrying (connection trouble, timeouts, truncation)."""


class Transport:
    """Connections, retries and round-trip counting, shared by the client and its auth."""

    def __init__(
        self,
        settings: RegistrySettings,
        env: Mapping[str, str],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.stats = RegistryStats()
        self._sleep = sleep
        self._conns = _Connections(settings.timeout)
        backoff = env.get("ROCMENV_REGISTRY_BACKOFF")
        self._backoff = float(backoff) if backoff else 0.5

    def close(self) -> None:
        self._conns.close()

    def scheme_for(self, host: str) -> str:
        """Plain HTTP only for loopback registries and those configured as insecure."""
        if is_loopback_host(host) or host in self.settings.insecure:
            return "http"
        return "https"

    def send(self, method: str, url: str, headers: Mapping[str, str], kind: str) -> Response:
        parts = urllib.parse.urlsplit(url)
        host = parts.netloc
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn = self._conns.get(parts.scheme, host)
        self.stats.add(kind)
        full = {"User-Agent": USER_AGENT, **headers}
        try:
            try:
                status, hdrs, body = conn.request(method, path, full)
            except StaleConnection:
                # The server closed an idle keep-alive connection: reconnect once, at no cost.
                status, hdrs, body = conn.request(method, path, full)
        except TransportError as err:
            raise _Transient(f"{host}: {err}") from err
        return Response(status=status, headers=hdrs, body=body, url=url)

    def send_with_retries(
        self, method: str, url: str, headers: Mapping[str, str], kind: str
    ) -> Response:
        attempts = self.settings.retries + 1
        last = ""
        for attempt in range(attempts):
            try:
                resp = self.send(method, url, headers, kind)
            except _Transient as err:
                last = str(err)
                wait = None
            else:
                if resp.status not in RETRY_STATUSES:
                    return resp
                last = f"HTTP {resp.status} from {urllib.parse.urlsplit(url).netloc}"
                wait = _retry_after(resp.header("retry-after"))
                if wait is not None and wait > MAX_RETRY_AFTER:
                    raise RegistryUnavailable(
                        f"{redact(url)}: rate limited (HTTP {resp.status}); the registry asks to "
                        f"wait {wait:.0f} s",
                        hint="try again later, authenticate (`docker login`) for higher limits, "
                        "or configure a mirror",
                    )
                if attempt == attempts - 1:
                    if resp.status == 429:
                        raise RegistryUnavailable(
                            f"{redact(url)}: still rate limited (HTTP 429) after {attempts} attempts",
                            hint="try again later, authenticate (`docker login`) for higher "
                            "limits, or configure a mirror ([registry] mirrors)",
                        )
                    break  # a 5xx that outlived the retries: the registry is unavailable
            if attempt == attempts - 1:
                break
            if wait is None:
                wait = min(30.0, self._backoff * (2**attempt)) * (0.5 + random.random() / 2)
            self._sleep(wait)
        raise RegistryUnavailable(
            f"{method} {redact(url)} failed after {attempts} attempts: {last}",
            hint="check that the registry is up and reachable (network, proxy, firewall); "
            "set [registry] timeout/retries or ROCMENV_REGISTRY_TIMEOUT to adjust",
        )
