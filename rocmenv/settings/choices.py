"""The closed sets a setting chooses from: these tuples (argparse ``choices=``, the config
readers and the schema all use them) and, for the type checker, their ``Literal`` aliases —
read under ``if TYPE_CHECKING:`` (the run path does not import ``typing``:
:mod:`rocmenv.typecheck`), made from the tuples at run time, and held equal to them by
``tests/unit/test_typecheck.py``."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Final, Literal

    # the type checker's spelling of the tuples below (tests/unit/test_typecheck.py holds
    # them equal); at run time ``__getattr__`` makes each from its tuple
    EngineKind = Literal["docker-api", "docker-cli", "podman"]  # a concrete engine
    EngineName = Literal["auto", "docker-api", "docker-cli", "podman"]  # what a user may ask for
    PullPolicy = Literal["always", "missing", "never"]
    GpuIsolation = Literal["devices", "env"]
    GpuDeviceNaming = Literal["nodes", "cdi"]  # how run/options name the selected GPUs

ENGINE_KINDS: Final[tuple[EngineKind, ...]] = ("docker-api", "docker-cli", "podman")
ENGINE_NAMES: Final[tuple[EngineName, ...]] = ("auto", *ENGINE_KINDS)
PULL_POLICIES: Final[tuple[PullPolicy, ...]] = ("always", "missing", "never")
GPU_ISOLATIONS: Final[tuple[GpuIsolation, ...]] = ("devices", "env")
GPU_DEVICE_NAMINGS: Final[tuple[GpuDeviceNaming, ...]] = ("nodes", "cdi")
FAMILIES: Final[tuple[str, ...]] = ("nightly", "release", "floating", "date-only")  # of tags
GPU_REQUEST_STYLES: Final[tuple[str, ...]] = ("gres", "gpus")  # [slurm] gpu-request
PACKINGS: Final[tuple[str, ...]] = ("rocmenv", "slurm")  # [slurm] packing

if not TYPE_CHECKING:  # the aliases at run time, for whoever asks (the package's surface)
    from rocmenv.typecheck import literal

    __getattr__ = literal(
        {
            "EngineKind": ENGINE_KINDS,
            "EngineName": ENGINE_NAMES,
            "PullPolicy": PULL_POLICIES,
            "GpuIsolation": GPU_ISOLATIONS,
            "GpuDeviceNaming": GPU_DEVICE_NAMINGS,
        }
    )
