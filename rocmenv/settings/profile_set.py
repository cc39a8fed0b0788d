"""A file's ``[profiles.*]`` tables built into profiles over the profiles below them: the
built-ins, then the user's and the site's (defaults for profiles), then the project file's.
Each table is parsed over its base — its ``extends``, else a profile of the same name from
below (so a project's ``[profiles.rocm]`` refines the site's, which refines the built-in),
else the built-in ``rocm``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from rocmenv.errors import ConfigError
from rocmenv.lazy import Pattern
from rocmenv.settings.keys import as_str, did_you_mean
from rocmenv.settings.profiles import BUILTIN_PROFILES, Profile, parse_profile

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

PROFILE_NAME_RE = Pattern(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def build_profiles(
    raw_profiles: Any, where: str, path: Path, below: Mapping[str, Profile]
) -> dict[str, Profile]:
    """``below`` with the file's profiles added (or refined), each resolved through its
    ``extends`` chain."""
    if not isinstance(raw_profiles, dict):
        raise ConfigError(f"profiles in {where} must be a table of tables")
    for name in raw_profiles:
        if not PROFILE_NAME_RE.fullmatch(name):
            raise ConfigError(
                f"profile name {name!r} in {where} is not a name",
                hint="profile names match [A-Za-z0-9][A-Za-z0-9._-]* (letters, digits, . _ -)",
            )
    profiles: dict[str, Profile] = dict(below)
    done: set[str] = set()
    resolving: list[str] = []

    def build(name: str) -> Profile:
        if name in done:
            return profiles[name]
        raw = raw_profiles[name]
        if not isinstance(raw, dict):
            raise ConfigError(f"[profiles.{name}] in {where} must be a table")
        if name in resolving:
            raise ConfigError(
                f"profile {name!r} in {where} extends itself: {' -> '.join([*resolving, name])}"
            )
        resolving.append(name)
        base = _base_of(name, raw.get("extends"), raw_profiles, below, build)
        profiles[name] = parse_profile(name, raw, base, path)
        done.add(name)
        resolving.pop()
        return profiles[name]

    try:
        for name in raw_profiles:
            build(name)
    except RecursionError:
        raise ConfigError(
            f"the profiles in {where} extend each other too deeply",
            hint="keep `extends` chains short (a few levels)",
        ) from None
    return profiles


def _base_of(
    name: str,
    parent: Any,
    raw_profiles: Mapping[str, Any],
    below: Mapping[str, Profile],
    build: Callable[[str], Profile],
) -> Profile:
    """The profile ``name`` extends: its ``extends``, else the profile of the same name from
    below, else the built-in ``rocm``."""
    if parent is None:
        return below.get(name, BUILTIN_PROFILES["rocm"])
    parent = as_str(parent, f"[profiles.{name}].extends")
    if parent == name and name in below:
        return below[name]
    if parent in raw_profiles:
        return build(parent)
    if parent in below:
        return below[parent]
    known = sorted({*raw_profiles, *below})
    raise ConfigError(
        f"[profiles.{name}] extends unknown profile {parent!r}" + did_you_mean(parent, known)
    )
