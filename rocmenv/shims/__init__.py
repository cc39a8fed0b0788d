"""Shims, host side: :mod:`~rocmenv.shims.catalogue` (types, discovery, validation),
:mod:`~rocmenv.shims.bundle` (the launcher bundle), :mod:`~rocmenv.shims.probe` (probing
images). The in-container side is :mod:`rocmenv.launcher` and the top-level ``shims/``.
"""
