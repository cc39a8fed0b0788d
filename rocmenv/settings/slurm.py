"""Slurm settings: ``[slurm]`` and ``[suites.NAME.slurm]`` (which wins key by key)::

    [slurm]
    partition = "gpu"
    account = "ml"
    gpu-request = "gres"              # gres: --gres=gpu[:TYPE]:K; gpus: --gpus=K
    gres-type = "mi300x"
    time-factor = 2.0                 # --time = estimate x factor (at least min-time)
    min-time = 300                    # seconds
    extra-args = ["--qos=ci"]         # more srun/sbatch arguments
    gres-conf = "/etc/slurm/gres.conf"  # default: next to slurm.conf (scontrol show config)
    packing = "rocmenv"               # suite run: rocmenv packs job steps into one allocation;
                                      # "slurm": one job per test, Slurm's scheduler packs

Which tables count (a checkout's are ignored in untrusted mode) is decided once, by
:mod:`rocmenv.settings.resolve`.
"""

from __future__ import annotations

from pathlib import Path

from rocmenv.errors import ConfigError
from rocmenv.escape import control_char
from rocmenv.record import record, replace
from rocmenv.settings.keys import as_str, as_str_list, check_keys, did_you_mean

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, Literal

    GpuRequestStyle = Literal["gres", "gpus"]

    Packing = Literal["rocmenv", "slurm"]

GPU_REQUEST_STYLES: tuple[str, ...] = ("gres", "gpus")
PACKINGS: tuple[str, ...] = ("rocmenv", "slurm")
SLURM_KEYS = (
    "partition", "account", "gpu-request", "gres-type", "time-factor", "min-time",
    "extra-args", "gres-conf", "packing",
)  # fmt: skip


@record
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    gpu_request: GpuRequestStyle = "gres"
    gres_type: str | None = None
    time_factor: float = 2.0
    min_time: int = 300
    extra_args: tuple[str, ...] = ()
    gres_conf: Path | None = None
    packing: Packing = "rocmenv"


def _text(value: Any, where: str) -> str:
    """A string that goes onto a Slurm command line or an ``#SBATCH`` line: no control
    characters (a newline would start a line of its own in a batch script), in every mode."""
    text = as_str(value, where)
    bad = control_char(text)
    if bad is not None:
        raise ConfigError(
            f"{where} = {text!r} holds a control character ({bad!r})",
            hint="Slurm settings end up in srun arguments and #SBATCH lines; remove it",
        )
    return text


def _seconds(value: Any, where: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1e9:
        raise ConfigError(f"{where} must be a positive number of seconds, got {value!r}")
    return float(value)


def parse_slurm(table: Any, where: str, base: SlurmSettings | None = None) -> SlurmSettings:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    check_keys(table, SLURM_KEYS, where)
    s = base or SlurmSettings()
    if "partition" in table:
        s = replace(s, partition=_text(table["partition"], f"{where}.partition"))
    if "account" in table:
        s = replace(s, account=_text(table["account"], f"{where}.account"))
    if "gres-type" in table:
        s = replace(s, gres_type=_text(table["gres-type"], f"{where}.gres-type"))
    if "gpu-request" in table:
        style = _choice(table["gpu-request"], f"{where}.gpu-request", GPU_REQUEST_STYLES)
        s = replace(s, gpu_request="gres" if style == "gres" else "gpus")
    if "time-factor" in table:
        s = replace(s, time_factor=_seconds(table["time-factor"], f"{where}.time-factor"))
    if "min-time" in table:
        s = replace(s, min_time=int(_seconds(table["min-time"], f"{where}.min-time")))
    if "extra-args" in table:
        args = as_str_list(table["extra-args"], f"{where}.extra-args")
        s = replace(s, extra_args=tuple(_text(a, f"{where}.extra-args") for a in args))
    if "gres-conf" in table:
        s = replace(s, gres_conf=Path(_text(table["gres-conf"], f"{where}.gres-conf")))
    if "packing" in table:
        packing = _choice(table["packing"], f"{where}.packing", PACKINGS)
        s = replace(s, packing="rocmenv" if packing == "rocmenv" else "slurm")
    return s


def _choice(value: object, key: str, choices: tuple[str, ...]) -> str:
    """``value`` as one of ``choices``, or a ConfigError naming them (and the nearest)."""
    text = as_str(value, key)
    if text not in choices:
        raise ConfigError(
            f"{key} = {text!r} is not {' or '.join(choices)}" + did_you_mean(text, choices)
        )
    return text
