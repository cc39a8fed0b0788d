"""The site and user configuration: ``/etc/rocmenv/config.toml`` (the administrator's) and
``$XDG_CONFIG_HOME/rocmenv/config.toml`` (the user's, default ``~/.config``).

Both are trusted by definition — they lie outside any checkout — so untrusted mode still
reads them: they are where a runner's administrator sets mirrors, registry limits, the
Slurm partition and the untrusted policy once for every repository. In the settings
cascade (:mod:`rocmenv.settings.resolve`) they sit between the environment and the project
file, the site file above the user's. Schema (every key optional; unknown keys are errors
with a "did you mean")::

    engine = "podman"                 # auto | docker-api | docker-cli | podman

    [registry]                        # as in the project file (rocmenv.settings.registry)
    mirrors = { "docker.io" = ["mirror.lan:5000"] }

    [host]                            # sysfs-root, dev-root, gpus-from, podinfo-devices
                                      #   (relative: to this file)
    [slurm]                           # as in the project file (rocmenv.settings.slurm)
    partition = "mi300x"

    [policy]                          # the untrusted policy (rocmenv.settings.policy)
    mount-sources = ["/data"]

    [images]                          # the runner image cache (rocmenv.settings.images)
    cache = "/cache/rocmenv-images"

    [profiles.NAME]                   # defaults for profiles: a project profile of the same
                                      # name extends this one (as it extends a built-in)

``ROCMENV_SITE_CONFIG`` names another site file (empty: none) — tests use it so they never
read the real ``/etc/rocmenv``. A site or user file inside the checkout is refused in
untrusted mode (it would be the pull request's).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from rocmenv.errors import ConfigError
from rocmenv.record import record
from rocmenv.settings.choices import ENGINE_NAMES
from rocmenv.settings.declared import keys
from rocmenv.settings.files import load_toml
from rocmenv.settings.keys import as_choice, check_keys

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Final, Literal

    from rocmenv.settings.choices import EngineName

    SiteOrigin = Literal["site", "user"]

SITE_ENV: Final = "ROCMENV_SITE_CONFIG"
#: The administrator's file (``ROCMENV_SITE_CONFIG`` replaces it).
SYSTEM_SITE_CONFIG: Final = Path("/etc/rocmenv/config.toml")
SITE_KEYS: Final = keys("site")  # declared in rocmenv.settings.declared


@record
class SiteFile:
    """One site or user configuration file as read: every table checked for unknown keys and
    its values validated; tables kept as written until the resolver layers them."""

    origin: SiteOrigin
    path: Path
    engine: EngineName | None = None
    registry: Any = None
    host: Any = None
    slurm: Any = None
    policy: Any = None
    profiles: Mapping[str, Any] | None = None
    images: Any = None  # [images]: the runner image cache (rocmenv.settings.images)

    @property
    def where(self) -> str:
        return f"{self.origin} configuration {self.path}"


def site_paths(env: Mapping[str, str]) -> tuple[tuple[SiteOrigin, Path], ...]:
    """Where the site and user files are looked for (whether or not they exist), site first.

    The user file needs ``XDG_CONFIG_HOME`` or ``HOME``: without either there is none (the
    password database is not asked)."""
    out: list[tuple[SiteOrigin, Path]] = []
    named = env.get(SITE_ENV)
    if named is None:
        out.append(("site", SYSTEM_SITE_CONFIG))
    elif named.strip():
        out.append(("site", Path(named.strip())))
    xdg = env.get("XDG_CONFIG_HOME", "").strip()
    home = env.get("HOME", "").strip()
    if xdg and Path(xdg).is_absolute():
        out.append(("user", Path(xdg) / "rocmenv" / "config.toml"))
    elif home:
        out.append(("user", Path(home) / ".config" / "rocmenv" / "config.toml"))
    return tuple(out)


def load_site_files(env: Mapping[str, str]) -> tuple[SiteFile, ...]:
    """The site and user files that exist, site first, each validated."""
    files: list[SiteFile] = []
    for origin, path in site_paths(env):
        try:
            if not path.is_file():
                continue
        except (OSError, ValueError):
            continue
        files.append(read_site_file(origin, path))
    return tuple(files)


def read_site_file(origin: SiteOrigin, path: Path) -> SiteFile:
    """One file: its keys checked and every table validated now, so a mistake in it is an
    error naming this file whichever command runs."""
    from rocmenv.settings.policy import policy_from_table
    from rocmenv.settings.registry import registry_settings
    from rocmenv.settings.slurm import parse_slurm

    table = load_toml(path)
    where = f"{origin} configuration {path}"
    check_keys(table, SITE_KEYS, where)
    engine = table.get("engine")
    if "registry" in table:
        registry_settings(table["registry"], f"[registry] in {where}")
    if "slurm" in table:
        parse_slurm(table["slurm"], f"[slurm] in {where}")
    if "policy" in table:
        policy_from_table(table["policy"], f"[policy] in {where}")
    if "host" in table:
        from rocmenv.settings.host import host_settings

        host_settings(table["host"], path.parent, f"[host] in {where}")
    if "images" in table:
        from rocmenv.settings.images import ImageCacheSettings, image_cache_settings

        image_cache_settings(table["images"], f"[images] in {where}", path.parent,
                             ImageCacheSettings())  # fmt: skip
    profiles = table.get("profiles")
    if profiles is not None and not isinstance(profiles, dict):
        raise ConfigError(f"profiles in {where} must be a table of tables")
    return SiteFile(
        origin=origin,
        path=path,
        engine=as_choice(engine, ENGINE_NAMES, f"engine in {where}")  # type: ignore[arg-type]
        if engine is not None
        else None,
        registry=table.get("registry"),
        host=table.get("host"),
        slurm=table.get("slurm"),
        policy=table.get("policy"),
        profiles=profiles,
        images=table.get("images"),
    )
