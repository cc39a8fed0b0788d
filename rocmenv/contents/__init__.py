"""What is inside an image, read from the registry without pulling it: ``inspect``, ``diff``
and ``drift --inspect``. :mod:`~rocmenv.contents.layer` indexes one layer,
:mod:`~rocmenv.contents.image` stacks the indexes and reads Python, ROCm and shim verdicts
from them, :mod:`~rocmenv.contents.diff` compares two images.
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "read_image": "image",
        "diff_contents": "diff",
        "LayerStore": "store",
    },
)
