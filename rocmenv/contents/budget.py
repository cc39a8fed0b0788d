"""What reading one image's layers may spend, shared by the threads that read them.

A layer comes from the registry, so it is hostile until read: a ~20 MB gzip of zeros expands
to 20 GiB, a small layer can hold hundreds of megabytes of files we keep. The budget of one
image read (``[registry] limits``, :data:`rocmenv.settings.registry.CONTENT_LIMITS`):

- ``layer``: decompressed bytes of one layer;
- ``image``: decompressed bytes of all its layers (those indexed before count with the size
  recorded in their index, so an image is refused or not whatever the cache holds);
- ``layer-index``: bytes kept of all its layers (paths, kept texts, links, whiteouts);
- time: the command's registry deadline (``command-deadline``, ``ROCMENV_REGISTRY_DEADLINE``),
  checked at every read of decompressed data as well as between network reads, so a layer
  that expands without end cannot outlive it.

When one layer fails, :meth:`Budget.stop` ends the others at their next read (with
:class:`Stopped`, which the caller drops in favour of the first real error).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from rocmenv.errors import RegistryProtocolError, RegistryUnavailable
from rocmenv.settings.registry import RegistrySettings


class Stopped(Exception):
    """Another layer of the same image failed (or the command was interrupted)."""


class Budget:
    def __init__(
        self,
        *,
        layer: int,
        image: int,
        index: int,
        time_left: Callable[[], float],
        deadline: float,
    ) -> None:
        self.layer, self.image, self.index = layer, image, index
        self._time_left = time_left
        self._deadline = deadline
        self._lock = threading.Lock()
        self._image_spent = 0
        self._index_spent = 0
        self._stopped = threading.Event()

    @classmethod
    def of(cls, settings: RegistrySettings, time_left: Callable[[], float]) -> Budget:
        return cls(
            layer=settings.limit("layer"),
            image=settings.limit("image"),
            index=settings.limit("layer-index"),
            time_left=time_left,
            deadline=settings.command_deadline,
        )

    def stop(self) -> None:
        self._stopped.set()

    def check(self, digest: str) -> None:
        """Raise when the command's deadline has passed or another layer failed."""
        if self._stopped.is_set():
            raise Stopped()
        if self._time_left() <= 0:
            raise RegistryUnavailable(
                f"reading layer {digest} took longer than the command's deadline "
                f"({self._deadline:g} s); stopped",
                hint="a slow registry, or a layer that expands without end; if the image is "
                "just large, raise [registry] command-deadline or ROCMENV_REGISTRY_DEADLINE",
            )

    def spend_layer(self, digest: str, layer_total: int) -> None:
        if layer_total > self.layer:
            raise RegistryProtocolError(
                f"layer {digest} is over its limit of {self.layer} bytes once decompressed "
                "([registry] limits.layer)",
                hint="a decompression bomb, or a layer larger than allowed; if the image is "
                "right, raise [registry] limits.layer",
            )

    def spend_image(self, digest: str, n: int) -> None:
        with self._lock:
            self._image_spent += n
            spent = self._image_spent
        if spent > self.image:
            raise RegistryProtocolError(
                f"the image's layers are over their limit of {self.image} bytes once "
                f"decompressed (at layer {digest}; [registry] limits.image)",
                hint="a decompression bomb, or an image larger than allowed; if the image is "
                "right, raise [registry] limits.image",
            )

    def spend_index(self, digest: str, n: int) -> None:
        with self._lock:
            self._index_spent += n
            spent = self._index_spent
        if spent > self.index:
            raise RegistryProtocolError(
                f"what is kept of the image's layers is over its limit of {self.index} bytes "
                f"(at layer {digest}; [registry] limits.layer-index)",
                hint="the layer holds an unusual amount of what inspect keeps (package metadata, "
                "*.pth, pyvenv.cfg, shim sources); if the image is right, raise "
                "[registry] limits.layer-index",
            )
