"""Scrub credentials and tokens from anything we print or log.

Two layers: known secret values, and patterns that look like credentials wherever they come
from (``Authorization`` headers, ``user:pass@`` in URLs, ``token=``/``password=`` pairs, JWTs).
Known values are registered for good by :func:`register_secret` (passwords and tokens the
registry client handled: the caller knows they are secrets), or for the length of a
:func:`masking` block (the values of secret-looking environment variables, registered by the
CLI before it prints anything; guessed by name, so :func:`secret_forms` first drops what
cannot be a secret and adds the spellings a tool may print).

Every value is looked for with ``str.find`` (one linear pass each) and the spans found are
merged before anything is replaced, so two secrets that overlap in the text are both masked
whole (replacing one first would leave the other's tail). Standard library only: bootstrap
runs this inside job containers.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

MASK = "***"

_lock = threading.Lock()
_secrets: set[str] = set()  # register_secret(): for the life of the process
_scoped: dict[str, int] = {}  # masking(): value -> how many open blocks registered it
_known: tuple[str, ...] | None = None  # both together; None after a change

#: Values of secret-looking variables that are switches, not secrets (any case).
_NOT_SECRETS = frozenset({"true", "false", "yes", "no", "on", "off", "none", "null"})
#: Characters JSON, ``repr`` and percent-encoding leave as they are.
_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~-")

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
#: An ASCII text none of the patterns can match: it holds none of these (lower-cased): each
#: pattern needs one — authorization, bearer|basic, ``://``, the key words, a JWT's ``eyJ``.
#: Most messages (a note, a timing) then cost no compile and no scan.
_PATTERN_CUES = ("auth", "bearer", "basic", "://", "token", "passw", "secret", "api", "eyj")


def register_secret(value: str | None) -> None:
    """Remember a secret value so that it is masked wherever it appears later."""
    global _known
    if value and len(value) >= 4:
        with _lock:
            _secrets.add(value)
            _known = None


def can_be_secret(text: str) -> bool:
    """Whether a value guessed to be secret (by its variable's name) is worth masking: not
    under 4 characters, not a switch (``true``/``false``/``yes``/``no``/``on``/``off``/
    ``none``/``null``, any case), not a plain number — masking those would garble every
    message (``TOKENIZERS_PARALLELISM=false``)."""
    return len(text) >= 4 and text.lower() not in _NOT_SECRETS and not _is_number(text)


def _is_number(text: str) -> bool:
    unsigned = text[1:] if text[:1] in ("+", "-") else text
    return unsigned.isascii() and unsigned.replace(".", "", 1).isdigit()


def secret_forms(value: str) -> tuple[str, ...]:
    """The spellings of a secret value to mask: the value, each line of a multi-line one,
    and its JSON-escaped, ``repr``-escaped and percent-encoded forms where they differ (how
    a tool that prints its environment or a URL shows it); only those :func:`can_be_secret`."""
    forms = [value, value.strip(), *secret_lines(value)]
    if not _PLAIN.issuperset(value):  # else every spelling is the value itself
        import json
        from urllib.parse import quote

        # safe="": a mutated safe set of letters is the same (quote never encodes letters)
        encoded = quote(value, safe="")  # pragma: no mutate
        forms += [json.dumps(value)[1:-1], repr(value)[1:-1], encoded]
    return tuple(form for form in dict.fromkeys(forms) if can_be_secret(form))


def secret_lines(value: str) -> tuple[str, ...]:
    """A secret value as a line-by-line log masker takes it (GitHub's ``::add-mask::``):
    each line, stripped, that :func:`can_be_secret`."""
    lines = (line.strip() for line in value.splitlines())
    return tuple(line for line in dict.fromkeys(lines) if can_be_secret(line))


@contextmanager
def masking(values: Iterable[str]) -> Iterator[None]:
    """Mask ``values`` (in all their :func:`secret_forms`) in every :func:`redact` until the
    block ends, from every thread; blocks nest, and a value :func:`register_secret` holds
    stays masked."""
    global _known
    forms = [form for value in values for form in secret_forms(value)]
    with _lock:
        for form in forms:
            _scoped[form] = _scoped.get(form, 0) + 1
        _known = None
    try:
        yield
    finally:
        with _lock:
            for form in forms:
                _scoped[form] -= 1
                if not _scoped[form]:
                    del _scoped[form]
            _known = None


def redact(text: str) -> str:
    """Return ``text`` with every known secret and credential-looking token masked."""
    global _known
    with _lock:
        if _known is None:
            _known = tuple(_secrets.union(_scoped))
        known = _known
    text = _mask_values(text, known)
    if not _may_match(text):
        return text
    with _lock:
        if not _patterns:
            _patterns.extend((re.compile(src), repl) for src, repl in _PATTERN_SOURCES)
        patterns = list(_patterns)
    for pattern, repl in patterns:
        text = pattern.sub(repl, text)
    return text


def _may_match(text: str) -> bool:
    """Whether a credential pattern may match ``text``; non-ASCII text always may (under
    ``(?i)`` a pattern also matches characters such as the Kelvin sign, which ``lower``
    does not map to ASCII)."""
    if not text.isascii():
        return True
    lower = text.lower()
    return any(cue in lower for cue in _PATTERN_CUES)


def _mask_values(text: str, values: tuple[str, ...]) -> str:
    """``text`` with every occurrence of every value masked; overlapping or adjacent
    occurrences become one mask."""
    spans: list[tuple[int, int]] = []
    for value in values:
        start = text.find(value)
        while start >= 0:
            end = start + len(value)
            after = text.find(value, start + 1)
            # a run of overlapping occurrences: one span. Equivalent mutants: a found `after`
            # is > start >= 0 (0 < and 1 <= read the same), and an adjacent one (after ==
            # end) the merge below joins anyway
            while 0 <= after <= end:  # pragma: no mutate
                end = after + len(value)
                after = text.find(value, after + 1)
            spans.append((start, end))
            start = after
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    kept = 0  # pragma: no mutate  (text[:kept] is in out; text[None:] reads the same)
    first, last = spans[0]
    for start, end in spans[1:]:
        if start <= last:
            last = max(last, end)
            continue
        out += (text[kept:first], MASK)
        kept, first, last = last, start, end
    out += (text[kept:first], MASK, text[last:])
    return "".join(out)


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
