"""Scrub credentials and tokens from anything we print or log.

Two layers: known secret values registered at run time (passwords and tokens the
registry client handled), and patterns that look like credentials wherever they come from
(``Authorization`` headers, ``user:pass@`` in URLs, ``token=``/``password=`` pairs, JWTs).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import Any

MASK = "***"

_lock = threading.Lock()
_secrets: set[str] = set()

_PATTERN_SOURCES: tuple[tuple[str, str], ...] = (
    # (no two adjacent \s* runs: they backtrack quadratically over a run of spaces)
    (r"(?i)(authorization\s*[:=])(\s*(?:bearer|basic))?\s*[^\s,;'\"]+", r"\1\2 " + MASK),
    (r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}", r"\1 " + MASK),
    # URL userinfo, ``user:password@`` or a bare ``token@`` (git over https takes both)
    # (the scheme is bounded: an unbounded one rescans from every '.', quadratic on "a.a.a…")
    (r"(?i)([a-z][a-z0-9+.-]{0,31}://)[^/?#@\s\"'<>]+(?:@[^/?#@\s\"'<>]+)*@", r"\1" + MASK + "@"),
    (
        r"(?i)((?:access_?token|refresh_?token|token|password|passwd|secret|api_?key|auth)"
        r"[\"']?\s*[:=]\s*[\"']?)[^\s,;&'\"}]+",
        r"\1" + MASK,
    ),
    (r"\beyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*", MASK),
)
_patterns: list[tuple[re.Pattern[str], str]] = []  # compiled on first use, not at import


def register_secret(value: str | None) -> None:
    """Remember a secret value so that it is masked wherever it appears later."""
    if value and len(value) >= 4:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """Return ``text`` with every known secret and credential-looking token masked."""
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
        if not _patterns:
            _patterns.extend((re.compile(src), repl) for src, repl in _PATTERN_SOURCES)
        patterns = list(_patterns)
    for secret in secrets:
        text = text.replace(secret, MASK)
    for pattern, repl in patterns:
        text = pattern.sub(repl, text)
    return text


def redact_url(url: str) -> str:
    """``url`` with any userinfo (``user:token@``, ``token@``) masked: what to show of a git
    remote or a registry endpoint."""
    return redact(url)


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line as it may be shown (reports, error messages, ``--debug``)."""
    return [redact(str(arg)) for arg in argv]


def redact_json(value: Any) -> Any:
    """A JSON-shaped document with every string (keys included) redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact_json(k): redact_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_json(v) for v in value]
    return value
