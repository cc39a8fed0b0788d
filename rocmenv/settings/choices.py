"""The closed sets a setting chooses from, spelled once (argparse ``choices=``, the config
readers and the schema all use these)."""

from __future__ import annotations

from typing import Final, Literal, get_args

EngineKind = Literal["docker-api", "docker-cli", "podman"]  # a concrete engine
EngineName = Literal["auto", "docker-api", "docker-cli", "podman"]  # what a user may ask for
ENGINE_KINDS: Final[tuple[EngineKind, ...]] = get_args(EngineKind)
ENGINE_NAMES: Final[tuple[EngineName, ...]] = get_args(EngineName)

PullPolicy = Literal["always", "missing", "never"]
PULL_POLICIES: Final[tuple[PullPolicy, ...]] = get_args(PullPolicy)

GpuIsolation = Literal["devices", "env"]

GpuDeviceNaming = Literal["nodes", "cdi"]  # how run/options name the selected GPUs
GPU_DEVICE_NAMINGS: Final[tuple[GpuDeviceNaming, ...]] = get_args(GpuDeviceNaming)
