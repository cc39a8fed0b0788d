"""Shims, host side: :mod:`~rocmenv.shims.catalogue` (types, discovery, validation),
:mod:`~rocmenv.shims.bundle` (the launcher bundle), :mod:`~rocmenv.shims.probe` (probing
images). The in-container side is :mod:`rocmenv.launcher` and the top-level ``shims/``.
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "ShimInfo": "catalogue",
        "LauncherBundle": "catalogue",
        "discover_shims": "catalogue",
        "prepare_launcher": "bundle",
        "install_launcher": "bundle",
        "check_image_versions": "probe",
        "classify": "probe",
        "parse_probe_output": "probe",
    },
)
