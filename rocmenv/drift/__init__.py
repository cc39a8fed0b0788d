"""Image drift: what moved behind the pinned tags of a lockfile, and what changed inside.

:mod:`~rocmenv.drift.check` asks the registry (moved, newer, could not check),
:mod:`~rocmenv.drift.inspect` probes and compares the images (``--inspect``),
:mod:`~rocmenv.drift.report` renders the results (text, markdown, JSON).
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "ImageDrift": "check",
        "check_all": "check",
        "inspect_all": "inspect",
        "report_json": "report",
        "render_text": "report",
        "render_markdown": "report",
    },
)
