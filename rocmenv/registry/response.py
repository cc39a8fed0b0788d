"""What a registry answer becomes: the response value, ``ratelimit-*`` headers, ``Retry-After``,
and the round-trip counters of a command."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Response:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    url: str

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True, kw_only=True)
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
