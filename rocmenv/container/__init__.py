"""The container: :mod:`~rocmenv.container.runspec` (the values), :mod:`~rocmenv.container.gpu` (host GPUs),
:mod:`~rocmenv.container.builder` (the trusted draft), :mod:`~rocmenv.container.guard` (untrusted mode),
:mod:`~rocmenv.container.plan` (the one planner), :mod:`~rocmenv.container.render` (docker, GHA, compose),
:mod:`~rocmenv.container.cdi` (CDI device names and spec).
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "RunSpec": "runspec",
        "Overrides": "runspec",
        "HostFacts": "runspec",
        "Device": "runspec",
        "BindMount": "runspec",
        "EnvVar": "runspec",
        "LauncherMount": "runspec",
        "GpuInventory": "gpu",
        "GpuSelection": "gpu",
        "discover": "gpu",
        "parse_gpus": "gpu",
        "generate_spec": "cdi",
        "cdi_support": "cdi",
        "build_runspec": "builder",
        "Guard": "guard",
        "guard_for": "guard",
        "Plan": "plan",
        "PlanRequest": "plan",
        "build_spec": "plan",
        "choose": "plan",
        "render_docker": "render",
        "render_gha": "render",
        "render_compose": "render",
    },
)
