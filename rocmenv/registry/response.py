"""What a registry answer becomes: the response value (or a body streamed to the caller),
``ratelimit-*`` headers, ``Retry-After``, and the round-trip counters of a command."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from rocmenv.errors import RegistryUnavailable
from rocmenv.record import record
from rocmenv.redact import redact

if TYPE_CHECKING:
    import urllib3


@record
class Response:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    url: str

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class StreamBroken(RegistryUnavailable):
    """A streamed body broke off or stalled before its end (the caller may resume it)."""


class BodyStream:
    """The body of an answer, read by the caller in pieces as sent (no content decoding):
    each read waits at most ``timeout``, and never past the command's deadline
    (``time_left``; :class:`RegistryUnavailable`); a connection that breaks or stalls is
    :class:`StreamBroken`. Close it (or read it to the end) to free the connection."""

    def __init__(
        self,
        raw: urllib3.BaseHTTPResponse,
        headers: Mapping[str, str],
        url: str,
        *,
        time_left: Callable[[], float],
        timeout: float,
        deadline: float,
    ) -> None:
        self.status = raw.status
        self.headers = headers
        self.url = url
        self._raw = raw
        self._time_left = time_left
        self._timeout = timeout
        self._deadline = deadline

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def close(self) -> None:
        self._raw.close()
        self._raw.release_conn()

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        import urllib.parse

        import urllib3

        host = urllib.parse.urlsplit(self.url).netloc
        sock = getattr(getattr(self._raw, "connection", None), "sock", None)
        received = 0
        try:
            while True:
                left = self._time_left()
                if left <= 0:
                    raise RegistryUnavailable(
                        f"{host}: {redact(self.url)} was still arriving at the command's "
                        f"deadline ({self._deadline:g} s), {received} bytes received; gave up",
                        hint="the registry or a proxy on the way is stalling; raise [registry] "
                        "command-deadline or ROCMENV_REGISTRY_DEADLINE if it is only slow",
                    )
                if sock is not None:
                    sock.settimeout(max(0.01, min(self._timeout, left)))
                try:
                    chunk = self._raw.read1(size, decode_content=False)
                except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as err:
                    if self._time_left() <= 0:
                        continue  # the deadline's own message, above
                    raise StreamBroken(f"{host}: the answer stalled ({received} bytes)") from err
                except (urllib3.exceptions.HTTPError, OSError) as err:
                    raise StreamBroken(
                        f"{host}: the answer broke off after {received} bytes: "
                        f"{redact(str(err))[:200]}"
                    ) from err
                if not chunk:
                    return
                received += len(chunk)
                yield chunk
        finally:
            self.close()


@record
class RateLimit:
    """Docker Hub's ``ratelimit-limit``/``ratelimit-remaining`` (``100;w=21600``)."""

    host: str
    limit: int | None
    remaining: int | None
    window: int | None  # seconds

    def as_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "limit": self.limit,
            "remaining": self.remaining,
            "window": self.window,
        }


def parse_ratelimit(host: str, headers: Mapping[str, str]) -> RateLimit | None:
    def number(value: str | None) -> tuple[int | None, int | None]:
        if not value:
            return None, None
        head, _, rest = value.partition(";")
        window = None
        if rest.strip().startswith("w="):
            w = rest.strip()[2:]
            window = int(w) if w.isdigit() else None
        head = head.strip()
        return (int(head) if head.isdigit() else None), window

    limit, window = number(headers.get("ratelimit-limit"))
    remaining, window2 = number(headers.get("ratelimit-remaining"))
    if limit is None and remaining is None:
        return None
    return RateLimit(host=host, limit=limit, remaining=remaining, window=window or window2)


class RegistryStats:
    """HTTP round trips made, by kind (``tags``, ``manifest-head``, ``token``, …)."""

    def __init__(self) -> None:
        self.by_kind: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RegistryStats(by_kind={self.by_kind!r})"

    def add(self, kind: str) -> None:
        with self._lock:
            self.by_kind[kind] += 1

    @property
    def requests(self) -> int:
        return sum(self.by_kind.values())


def retry_after(value: str | None) -> float | None:
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
