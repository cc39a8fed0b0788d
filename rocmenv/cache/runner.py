"""The image cache as the commands use it: settings in, an image present in the engine out.

:func:`present_with_settings` opens the cache the settings name, makes the registry client
for it (the command's registry settings, with the read timeout lowered to the source
window so that a stalled source is noticed within it, and no command-wide deadline shorter
than a day: a pull of tens of gigabytes is bounded by the throughput floor instead; blobs
from a mirror go through a second client without retries, so that a stalled mirror costs
one window and not one per retry), pins what the project's lockfile pins, and presents the
image.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rocmenv.cache.fetch import Floor
from rocmenv.cache.present import Observer, Presented, present
from rocmenv.cache.store import BlobCache
from rocmenv.context import Context
from rocmenv.engine.protocol import Engine
from rocmenv.settings.resolve import Settings

DAY = 86400.0


def lock_pins(paths: Iterable[Path]) -> set[str]:
    """The manifest digests the lockfiles pin (a missing or unreadable one pins nothing)."""
    import json

    out: set[str] = set()
    for path in paths:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict):
            continue
        entries = [
            entry
            for table in (doc.get("profiles"), doc.get("references"))
            if isinstance(table, dict)
            for entry in table.values()
        ]
        for entry in entries:
            if isinstance(entry, dict):
                for key in ("digest", "platform_digest"):
                    value = entry.get(key)
                    if isinstance(value, str) and value.startswith("sha256:"):
                        out.add(value)
    return out


def present_with_settings(
    ctx: Context, settings: Settings, engine: Engine, image: str, *, observer: Observer
) -> Presented:
    from rocmenv.record import replace
    from rocmenv.registry.client import RegistryClient

    images = settings.images
    assert images.cache is not None
    cache = BlobCache.open(images.cache)
    registry = replace(
        settings.registry,
        timeout=min(settings.registry.timeout, images.source_window),
        command_deadline=max(settings.registry.command_deadline, DAY),
    )
    floor = Floor(bytes_per_second=float(images.source_floor), window=images.source_window)
    token_cache = not settings.untrusted
    with (
        RegistryClient(ctx, registry, token_cache=token_cache) as client,
        RegistryClient(
            ctx, replace(registry, retries=0), token_cache=token_cache
        ) as mirrors_client,
    ):
        return present(
            engine, client, cache, image, observer=observer, reserve=settings.disk_reserve,
            max_size=images.max_size, floor=floor, pins=lock_pins([settings.lockfile]),
            mirrors_client=mirrors_client,
        )  # fmt: skip
