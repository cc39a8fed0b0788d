"""``[host]``: where the GPU topology and device nodes are read (project, site or user file;
``ROCMENV_SYSFS_ROOT``/``ROCMENV_DEV_ROOT`` over them)::

    [host]
    sysfs-root = "/sys"               # where class/kfd/kfd/topology lives
    dev-root = "/dev"                 # where kfd and dri/ live

Relative paths are relative to the directory of the file that says them.
"""

from __future__ import annotations

from pathlib import Path

from rocmenv.errors import ConfigError
from rocmenv.record import record, replace
from rocmenv.settings.keys import as_str, check_keys

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Final

HOST_KEYS: Final = ("sysfs-root", "dev-root")


@record
class HostSettings:
    sysfs_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")


def host_settings(
    table: Any, root: Path, where: str, base: HostSettings | None = None
) -> HostSettings:
    """``[host]`` over ``base``: the keys it sets, paths relative to ``root``."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    check_keys(table, HOST_KEYS, where)
    host = base or HostSettings()
    if "sysfs-root" in table:
        host = replace(host, sysfs_root=root / as_str(table["sysfs-root"], f"{where}.sysfs-root"))
    if "dev-root" in table:
        host = replace(host, dev_root=root / as_str(table["dev-root"], f"{where}.dev-root"))
    return host
