"""Reading configuration tables: typed values with the key path in every error, unknown keys
with a "did you mean". Every reader of a TOML table (project file, site configuration,
policy file) uses these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rocmenv.errors import ConfigError, UsageError
from rocmenv.lazy import Pattern

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any


def did_you_mean(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(
                f"unknown key {key!r} in {where}" + did_you_mean(key, allowed),
                hint=f"allowed keys: {', '.join(allowed)}",
            )


def as_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {type(value).__name__} {value!r}")
    return value


def as_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    return value


def as_int(value: Any, where: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where} must be a whole number of at least {minimum}, got {value!r}")
    return value


def as_str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    return tuple(value)


def as_choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    text = as_str(value, where)
    if text not in choices:
        raise ConfigError(
            f"{where} = {text!r} is not one of {', '.join(choices)}" + did_you_mean(text, choices)
        )
    return text


_SIZE = Pattern(r"([0-9]+(?:\.[0-9]+)?)\s*([kmgtp]?)(i?b)?", re.I)


def parse_size(text: str) -> int:
    """``20g``, ``500MB``, ``1.5TiB``, ``0`` — powers of 1024 (as Docker's sizes)."""
    digits, unit = text[:-1], text[-1:].lower()
    if digits.isascii() and digits.isdigit() and unit in "kmgtp":  # "2g": no expression needed
        return int(digits) << (10 * " kmgtp".index(unit))
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise UsageError(f"{text!r} is not a size", hint="write e.g. 20g, 500m or 1.5t")
    unit = match.group(2).lower()
    return int(float(match.group(1)) * (1 << (10 * " kmgtp".index(unit or " "))))
