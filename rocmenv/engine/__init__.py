"""Container engines: the protocol and its values (:mod:`~rocmenv.engine.protocol`), choosing one
(:mod:`~rocmenv.engine.select`), a container's life (:mod:`~rocmenv.engine.container`), the
adapters (:mod:`~rocmenv.engine.docker_api`, :mod:`~rocmenv.engine.cli_engine`).
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "Engine": "protocol",
        "EngineInfo": "protocol",
        "ImageInfo": "protocol",
        "LocalImage": "protocol",
        "StoreInfo": "protocol",
        "ContainerInfo": "protocol",
        "PullEvent": "protocol",
        "CaptureResult": "protocol",
        "Attachment": "protocol",
        "make_engine": "select",
        "open_engine": "select",
        "choose_engine_kind": "select",
        "detect_engine": "select",
        "Container": "container",
        "capture": "container",
    },
)
