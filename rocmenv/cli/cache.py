"""``rocmenv cache status|prune``: the runner image cache (:mod:`rocmenv.cache`).

``status`` says where the cache is, its size against its cap and the free space beside it,
and each image it holds (reference, size, last use, whether a lockfile pins it).
``prune`` removes blobs least recently used first until the cache fits ``--max-size`` (the
``[images] max-size`` setting by default) and ``--reserve`` stays free, a lockfile's pins
last; ``--all`` empties it (a blob another job is reading or fetching stays either way).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rocmenv.context import Context


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION")
    actions.required = True
    for action, text in (("status", "show the cache: size, cap, free space, images"),
                         ("prune", "remove least recently used blobs (pins last)")):  # fmt: skip
        sp = actions.add_parser(action, help=text, description=text)
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        sp.add_argument(
            "--lock", action="append", type=Path, default=[], metavar="FILE",
            help="lockfile(s) whose images are pinned (default: the project's)",
        )  # fmt: skip
        if action == "prune":
            sp.add_argument("--max-size", metavar="SIZE", help="prune until the cache fits SIZE")
            sp.add_argument("--reserve", metavar="SIZE",
                            help="free space to keep beside the cache (default: as pull)")  # fmt: skip
            sp.add_argument("--all", action="store_true", help="remove every blob")
            sp.add_argument("--dry-run", action="store_true", help="only say what would go")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cache.prune import image_blobs, pinned_blobs, plan_prune, prune
    from rocmenv.cache.runner import lock_pins
    from rocmenv.cache.store import BlobCache
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.errors import UsageError
    from rocmenv.escape import shown
    from rocmenv.run.pull import human_bytes
    from rocmenv.settings.keys import parse_size
    from rocmenv.settings.resolve import Flags, settings_for

    settings = settings_for(ctx, Flags(reserve=getattr(args, "reserve", None)))
    if settings.images.cache is None:
        raise UsageError(
            "no image cache is configured",
            hint="set ROCMENV_IMAGE_CACHE=DIR or [images] cache in the site configuration",
        )
    cache = BlobCache.open(settings.images.cache)
    pins = lock_pins(args.lock or [settings.lockfile])
    pinned = pinned_blobs(cache, pins)
    blobs = cache.blobs()
    if args.cache_action == "status":
        images: list[dict[str, Any]] = []
        for image in sorted(cache.images(), key=lambda i: -i["used_at"]):
            held = image_blobs(cache, image["manifest"])
            images.append({
                "reference": image["reference"], "manifest": image["manifest"],
                "config": image["config"], "size": image["size"],
                "used_at": round(image["used_at"], 3), "pinned": image["manifest"] in pins,
                "complete": set(image["blobs"]) <= {b.digest for b in blobs} | held,
            })  # fmt: skip
        doc: dict[str, Any] = {
            "cache": str(cache.root),
            "size": sum(b.size for b in blobs),
            "partial": cache.partial_bytes(),
            "blobs": len(blobs),
            "pinned_blobs": len(pinned & {b.digest for b in blobs}),
            "max_size": settings.images.max_size,
            "free": cache.free(),
            "images": images,
        }
        if args.json:
            emit_json(ctx, doc)
            return 0
        cap = f" of {human_bytes(settings.images.max_size)}" if settings.images.max_size else ""
        emit(ctx, f"{cache.root}: {human_bytes(doc['size'])}{cap} in {len(blobs)} blobs "
                  f"({doc['pinned_blobs']} pinned), {human_bytes(doc['free'])} free")  # fmt: skip
        now = time.time()
        for item in images:
            age = f"{(now - item['used_at']) / 3600:.1f} h ago"
            mark = " [pinned]" if item["pinned"] else ""
            emit(
                ctx, f"  {shown(item['reference'])}  {human_bytes(item['size'])}  used {age}{mark}"
            )
        return 0
    max_size = parse_size(args.max_size) if args.max_size else settings.images.max_size
    plan = plan_prune(
        blobs, pinned=pinned, keep=set(), max_size=0 if args.all else max_size,
        reserve=0 if args.all else settings.disk_reserve, free=cache.free(),
    )  # fmt: skip
    gone = list(plan.remove) if args.dry_run else prune(cache, plan)
    if args.json:
        emit_json(ctx, {
            "removed": [{"digest": b.digest, "size": b.size, "pinned": b.digest in pinned}
                        for b in gone],
            "kept_busy": len(plan.remove) - len(gone),
            "size_before": plan.size_before,
            "size_after": plan.size_before - sum(b.size for b in gone),
            "dry_run": bool(args.dry_run),
        })  # fmt: skip
        return 0
    verb = "would remove" if args.dry_run else "removed"
    emit(ctx, f"{verb} {len(gone)} blobs ({human_bytes(sum(b.size for b in gone))}); "
              f"{human_bytes(plan.size_before - sum(b.size for b in gone))} left")  # fmt: skip
    return 0
