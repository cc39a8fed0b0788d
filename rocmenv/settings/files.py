"""Configuration files: finding the project file, reading TOML strictly, and telling whose a
file is (the checkout's, or trusted input outside it).

The project file is ``rocmenv.toml``, or ``[tool.rocmenv]`` in ``pyproject.toml``, found from
the working directory upwards (stopping at the checkout root), or named by ``--config`` /
``ROCMENV_CONFIG``. Files over :data:`MAX_FILE_BYTES`, not UTF-8, not TOML, nested too deeply
or holding a NUL character are :class:`~rocmenv.errors.ConfigError` (exit 2), never a
traceback: a checkout may carry anything.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rocmenv.context import Context, find_checkout
from rocmenv.errors import ConfigError
from rocmenv.escape import shown
from rocmenv.hostfs import is_under

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

#: The largest project file (rocmenv.toml, pyproject.toml) or lockfile read (a real one is
#: kilobytes; a checkout may carry anything).
MAX_FILE_BYTES = 16 << 20


def load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise ConfigError(
                f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB: not a rocmenv configuration",
                hint="point --config/ROCMENV_CONFIG at the project's rocmenv.toml",
            )
        data: dict[str, Any] = tomllib.loads(raw.decode("utf-8"))
        nul = find_nul(data)
        if nul is not None:
            raise ConfigError(
                f"{path}: {nul} contains a NUL character (\\u0000)",
                hint="no path, name or value rocmenv passes on can hold one; remove it",
            )
        return data
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}") from err
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(
            f"{path} is not valid TOML: {err}", hint="fix the syntax at that line"
        ) from err
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {err.start}: {err.object[err.start : err.start + 1]!r})",
            hint="TOML files are UTF-8; re-save the file as UTF-8",
        ) from None
    except RecursionError:
        raise ConfigError(
            f"{path} nests arrays or tables too deeply to read",
            hint="flatten the structure; rocmenv's keys nest at most three levels",
        ) from None


def find_nul(value: Any, where: str = "") -> str | None:
    """The key path of the first string (or key) holding a NUL character, else ``None``.
    Iterative: a document nested as deep as the parser allows is walked without recursion."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        here, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return here or "a value"
        elif isinstance(item, dict):
            for key, sub in item.items():
                name = f"{here}.{key}" if here else str(key)
                if "\x00" in str(key):
                    return shown(name)
                stack.append((name, sub))
        elif isinstance(item, list):
            stack.extend((f"{here}[{i}]", sub) for i, sub in enumerate(item))
    return None


def explicit_config(ctx: Context) -> Path | None:
    """The file ``--config`` or ``ROCMENV_CONFIG`` names (relative to the working directory)."""
    explicit = ctx.config_path or (
        Path(ctx.env["ROCMENV_CONFIG"]) if ctx.env.get("ROCMENV_CONFIG") else None
    )
    if explicit is None:
        return None
    return explicit if explicit.is_absolute() else ctx.cwd / explicit


def find_project_file(ctx: Context) -> tuple[Path | None, dict[str, Any]]:
    """The project file and its rocmenv table: --config, ROCMENV_CONFIG, else search upwards."""
    explicit = explicit_config(ctx)
    if explicit is not None:
        if not _is_file(explicit):
            raise ConfigError(
                f"config file {explicit} does not exist", hint="check --config / ROCMENV_CONFIG"
            )
        return explicit, _rocmenv_table(explicit, load_toml(explicit))
    for directory in (ctx.cwd, *ctx.cwd.parents):
        candidate = directory / "rocmenv.toml"
        if _is_file(candidate):
            return candidate, _rocmenv_table(candidate, load_toml(candidate))
        pyproject = directory / "pyproject.toml"
        if _is_file(pyproject):
            data = load_toml(pyproject)
            if isinstance(data.get("tool"), dict) and "rocmenv" in data["tool"]:
                return pyproject, _rocmenv_table(pyproject, data)
        if (directory / ".git").exists():
            break  # don't wander out of the checkout
    return None, {}


def _is_file(path: Path) -> bool:
    """``path.is_file()``, false for a name the OS refuses (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _rocmenv_table(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("rocmenv")
        if table is None:
            raise ConfigError(
                f"{path} has no [tool.rocmenv] table", hint="add one or use rocmenv.toml"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"[tool.rocmenv] in {path} must be a table")
        return table
    return data


def file_trusted(ctx: Context, path: Path | None) -> bool:
    """No file, or one named by ``--config``/``ROCMENV_CONFIG`` that lies outside the
    checkout: a file found in (or named inside) the checkout is the checkout's."""
    if path is None:
        return True
    if explicit_config(ctx) is None:
        return False
    checkout = os.path.realpath(find_checkout(ctx.cwd))
    return not is_under(os.path.realpath(path), checkout)
