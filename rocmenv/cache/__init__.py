"""The runner image cache: a persistent, content-addressed directory of registry blobs that
the jobs of a node share (``ROCMENV_IMAGE_CACHE`` / ``[images] cache``).

:mod:`~rocmenv.cache.store` (the directory, locks, verified blobs),
:mod:`~rocmenv.cache.fetch` (one fetch per blob per node, sources that do not stall),
:mod:`~rocmenv.cache.archive` (the image streamed into ``docker load``/``podman load``),
:mod:`~rocmenv.cache.present` (an image made present in the engine through the cache),
:mod:`~rocmenv.cache.prune` (the cap, the reserve, least recently used first, pins last),
:mod:`~rocmenv.cache.runner` (what ``pull``/``run``/``suite run`` call with their settings).
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "BlobCache": "store",
        "present": "present",
        "present_with_settings": "runner",
    },
)
