"""A container's run: :mod:`~rocmenv.run.execute` (run and shell), :mod:`~rocmenv.run.pull` (pulls
with a plan, a disk budget and retries), :mod:`~rocmenv.run.progress` (the pull display),
:mod:`~rocmenv.run.images` (the record of what rocmenv pulled).
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "RunRequest": "execute",
        "Reporter": "execute",
        "execute": "execute",
        "fetch": "pull",
        "PullResult": "pull",
        "RetryPolicy": "pull",
        "PullDisplay": "progress",
        "pull_with_display": "progress",
    },
)
