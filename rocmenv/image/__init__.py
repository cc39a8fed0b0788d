"""Which image a command uses: the lockfile (:mod:`~rocmenv.image.lock`), and resolving, pinning,
validating and choosing images (:mod:`~rocmenv.image.pinning`).
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "Lock": "lock",
        "LockEntry": "lock",
        "read_lock": "lock",
        "write_lock": "lock",
        "update_lock": "lock",
        "ImageChoice": "pinning",
        "choose_image": "pinning",
        "resolve": "pinning",
        "pin_spec": "pinning",
        "pin_reference": "pinning",
        "validate": "pinning",
        "make_client": "pinning",
    },
)
