"""``rocmenv bootstrap``, one module per step: :mod:`~rocmenv.bootstrap.steps` (the order,
exports, report) with :mod:`~rocmenv.bootstrap.progress` (how a step ends, what a failure
skips), :mod:`~rocmenv.bootstrap.gpuwait`, :mod:`~rocmenv.bootstrap.procs`,
:mod:`~rocmenv.bootstrap.refs` + :mod:`~rocmenv.bootstrap.overrides`,
:mod:`~rocmenv.bootstrap.envreport`; commands run through :mod:`~rocmenv.bootstrap.commands`.
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "BootstrapOptions": "steps",
        "BootstrapResult": "steps",
        "run_bootstrap": "steps",
    },
)
