"""``[host]``: where the GPU topology and device nodes are read, and which of the GPUs are
this runner's (project, site or user file; ``ROCMENV_SYSFS_ROOT``, ``ROCMENV_DEV_ROOT``,
``ROCMENV_GPUS_FROM``, ``ROCMENV_PODINFO_DEVICES`` over them)::

    [host]
    sysfs-root = "/sys"               # where class/kfd/kfd/topology lives
    dev-root = "/dev"                 # where kfd and dri/ live
    gpus-from = "gpus.txt"            # the GPU pool: a file of --device flags or node paths
    podinfo-devices = "/etc/podinfo/gha-render-devices"  # an ARC runner pod's device list:
                                      #   the pool when it exists and gpus-from is not set;
                                      #   "" for none

Relative paths are relative to the directory of the file that says them (the variables':
to the working directory). The files' format: :mod:`rocmenv.container.pool`.
"""

from __future__ import annotations

from pathlib import Path

from rocmenv.errors import ConfigError
from rocmenv.record import record, replace
from rocmenv.settings.declared import default, keys
from rocmenv.settings.keys import as_str, check_keys

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Final

HOST_KEYS: Final = keys("host")  # declared, with their defaults, in rocmenv.settings.declared
PODINFO_DEVICES: Final = Path(default("host", "podinfo-devices"))


@record
class HostSettings:
    sysfs_root: Path = Path(default("host", "sysfs-root"))
    dev_root: Path = Path(default("host", "dev-root"))
    gpus_from: Path | None = None  # a device list naming the GPU pool (must exist)
    podinfo_devices: Path | None = PODINFO_DEVICES  # the pod's list, used when it exists


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
    if "gpus-from" in table:
        text = as_str(table["gpus-from"], f"{where}.gpus-from")
        host = replace(host, gpus_from=root / text if text else None)
    if "podinfo-devices" in table:
        text = as_str(table["podinfo-devices"], f"{where}.podinfo-devices")
        host = replace(host, podinfo_devices=root / text if text else None)
    return host
