"""The runner image cache's settings: ``[images]`` in the site or user file, and
``ROCMENV_IMAGE_CACHE`` / ``ROCMENV_IMAGE_CACHE_MAX`` / ``ROCMENV_SOURCE_FLOOR`` /
``ROCMENV_SOURCE_WINDOW`` above it. Never in a project file: where rocmenv keeps tens of
gigabytes on a runner, and how much, is the runner's administrator's to say, not a
checkout's (:mod:`rocmenv.cache` writes there)::

    [images]
    cache = "/cache/rocmenv-images"   # absolute: a directory that survives between jobs
    max-size = "300g"                 # the cache's cap (least recently used goes first)
    source-floor = "1m"               # bytes per second below which a source is left …
    source-window = 20                # … when it stays below for this many seconds
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rocmenv.errors import ConfigError, UsageError
from rocmenv.record import record, replace
from rocmenv.settings.declared import default, keys, variables
from rocmenv.settings.keys import as_str, check_keys, parse_size

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

IMAGES_KEYS = keys("images")  # declared in rocmenv.settings.declared
IMAGES_ENV = variables("images")
DEFAULT_FLOOR: int = default("images", "source-floor")  # bytes/s (rocmenv.cache.fetch: why)
DEFAULT_WINDOW: float = default("images", "source-window")


@record
class ImageCacheSettings:
    cache: Path | None = None  # None: no runner cache, the engine pulls
    max_size: int | None = None
    source_floor: int = DEFAULT_FLOOR
    source_window: float = DEFAULT_WINDOW


def _size(text: str, where: str) -> int:
    try:
        return parse_size(text)
    except UsageError as err:
        raise ConfigError(f"{where}: {err.what}", hint=err.hint) from None


def _cache_dir(text: str, where: str, root: Path | None) -> Path:
    path = Path(text.strip())
    if not path.is_absolute() and root is not None:
        path = root / path
    if not text.strip() or not path.is_absolute():
        raise ConfigError(
            f"{where} = {text!r} is not an absolute directory",
            hint="name the persistent volume's directory, e.g. /cache/rocmenv-images",
        )
    return path


def _window(value: Any, where: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not 1 <= seconds <= 3600 or isinstance(value, bool):
        raise ConfigError(f"{where} = {value!r}: must be a number of seconds from 1 to 3600")
    return seconds


def image_cache_settings(
    table: Any, where: str, root: Path | None, base: ImageCacheSettings
) -> ImageCacheSettings:
    """``[images]`` of one file over ``base`` (relative paths: to the file's directory)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    check_keys(table, IMAGES_KEYS, where)
    out = base
    if "cache" in table:
        out = replace(out, cache=_cache_dir(as_str(table["cache"], f"{where}.cache"),
                                           f"{where}.cache", root))  # fmt: skip
    if "max-size" in table:
        text = as_str(table["max-size"], f"{where}.max-size")
        out = replace(out, max_size=_size(text, f"{where}.max-size"))
    if "source-floor" in table:
        text = as_str(table["source-floor"], f"{where}.source-floor")
        out = replace(out, source_floor=_size(text, f"{where}.source-floor"))
    if "source-window" in table:
        out = replace(out, source_window=_window(table["source-window"], f"{where}.source-window"))
    return out


def env_image_cache(env: Mapping[str, str], base: ImageCacheSettings) -> ImageCacheSettings:
    out = base
    text = env.get("ROCMENV_IMAGE_CACHE", "").strip()
    if text:
        out = replace(out, cache=_cache_dir(text, "ROCMENV_IMAGE_CACHE", None))
    text = env.get("ROCMENV_IMAGE_CACHE_MAX", "").strip()
    if text:
        out = replace(out, max_size=_size(text, "ROCMENV_IMAGE_CACHE_MAX"))
    text = env.get("ROCMENV_SOURCE_FLOOR", "").strip()
    if text:
        out = replace(out, source_floor=_size(text, "ROCMENV_SOURCE_FLOOR"))
    text = env.get("ROCMENV_SOURCE_WINDOW", "").strip()
    if text:
        out = replace(out, source_window=_window(text, "ROCMENV_SOURCE_WINDOW"))
    return out
