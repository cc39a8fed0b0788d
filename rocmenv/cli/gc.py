"""``rocmenv gc [--dry-run] [--json]``: remove containers (and the overlay's scratch
volumes) whose rocmenv owner is gone;
``rocmenv gc --images …``: remove images rocmenv pulled that nothing needs
(:mod:`rocmenv.run.images`).

Only containers labelled by rocmenv on this host are considered; one is removed when the
process that made it (``rocmenv.owner-pid``, checked against its start time so a reused
pid does not count) no longer exists. A container whose owner is alive is never touched.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rocmenv.context import Context
from rocmenv.settings.choices import ENGINE_NAMES


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--engine", choices=ENGINE_NAMES, help="container engine")
    images = parser.add_argument_group("images (with --images)")
    images.add_argument(
        "--images", action="store_true",
        help="remove images rocmenv pulled that no lockfile references and no container uses",
    )  # fmt: skip
    images.add_argument(
        "--keep-locked", action=argparse.BooleanOptionalAction, default=True,
        help="keep images a lockfile references (default: yes)",
    )  # fmt: skip
    images.add_argument(
        "--lock", action="append", type=Path, default=[], metavar="FILE",
        help="lockfile(s) whose images are kept (default: the project's)",
    )  # fmt: skip
    images.add_argument(
        "--max-disk", metavar="SIZE", help="remove only until the images fit in SIZE (e.g. 200g)"
    )
    images.add_argument(
        "--older-than", metavar="DURATION", help="only images pulled longer ago (e.g. 7d, 12h)"
    )
    images.add_argument(
        "--include-foreign", action="store_true",
        help="also remove images rocmenv did not pull (same rules otherwise)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.engine.gc import collect_garbage
    from rocmenv.engine.select import open_engine
    from rocmenv.settings.resolve import Flags, settings_for

    config = settings_for(ctx, Flags(engine=args.engine))
    engine = open_engine(ctx, config.engine)
    if args.images:
        return run_images(args, ctx, engine, config)
    items = collect_garbage(engine, dry_run=args.dry_run)
    removed = [i for i in items if i.verdict == "remove"]
    if args.json:
        emit_json(
            ctx,
            {
                "dry_run": args.dry_run,
                "removed": [] if args.dry_run else [i.to_json() for i in removed],
                "would_remove": [i.to_json() for i in removed] if args.dry_run else [],
                "kept": [i.to_json() for i in items if i.verdict != "remove"],
            },
        )
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for item in items:
        what = verb if item.verdict == "remove" else "kept"
        shown = f"volume {item.name}" if item.kind == "volume" else f"{item.id[:12]} {item.name}"
        emit(
            ctx,
            f"{what} {shown} ({item.state}, profile {item.profile or '?'}): {item.reason}",
        )
    boxes = [i for i in removed if i.kind == "container"]
    volumes = len(removed) - len(boxes)
    also = f" and {volumes} volume(s)" if volumes else ""
    emit(ctx, f"{len(boxes)} container(s){also} {verb}, {len(items) - len(removed)} kept")
    return 0


def run_images(args: argparse.Namespace, ctx: Context, engine: Any, config: Any) -> int:
    import datetime as dt
    import os

    from rocmenv.cli._common import emit, emit_json
    from rocmenv.image.lock import read_lock
    from rocmenv.run.images import (
        forget,
        images_in_use,
        load_pulled,
        parse_duration,
        plan_image_gc,
    )
    from rocmenv.run.pull import human_bytes
    from rocmenv.settings.keys import parse_size

    locked: set[str] = set()
    if args.keep_locked:
        paths = [p if p.is_absolute() else ctx.cwd / p for p in args.lock] or [config.lockfile]
        for path in paths:
            lock = read_lock(path)
            for entry in (*lock.profiles.values(), *lock.references.values()):
                locked |= {entry.digest, entry.platform_digest}
    present = engine.list_images()
    pulled = load_pulled(ctx)
    verdicts = plan_image_gc(
        present,
        pulled,
        locked_digests=locked,
        in_use=images_in_use(engine),
        now=dt.datetime.now(dt.timezone.utc),
        older_than=parse_duration(args.older_than) if args.older_than else None,
        max_disk=parse_size(args.max_disk) if args.max_disk else None,
        include_foreign=args.include_foreign,
    )
    remove = [v for v in verdicts if v.verdict == "remove"]
    store = engine.store_info()

    def free() -> int | None:
        if not store.local or not os.path.isdir(store.data_root):
            return None
        stat = os.statvfs(store.data_root)
        return stat.f_bavail * stat.f_frsize

    before = free()
    removed = []
    if not args.dry_run:
        for verdict in remove:
            engine.remove_image(verdict.image.id)
            removed.append(verdict)
        gone = set(pulled) - {image.id for image in present}  # removed by other means
        forget(ctx, [v.image.id for v in removed] + sorted(gone))
    after = free()
    removed_bytes = sum(v.image.size for v in removed)
    # what the disk got back (other writers make it approximate); None: the store is remote
    reclaimed = max(after - before, 0) if before is not None and after is not None else None
    if args.json:
        emit_json(
            ctx,
            {
                "dry_run": args.dry_run,
                "removed": [v.to_json() for v in removed],
                "would_remove": [v.to_json() for v in remove] if args.dry_run else [],
                "kept": [v.to_json() for v in verdicts if v.verdict == "keep"],
                "removed_bytes": removed_bytes,
                "reclaimed_bytes": reclaimed,
            },
        )
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for verdict in remove:
        name = (verdict.image.repo_tags or verdict.image.repo_digests or ("<none>",))[0]
        when = verdict.pulled_at.strftime("%Y-%m-%d %H:%M") if verdict.pulled_at else "?"
        emit(
            ctx,
            f"{verb} {verdict.image.id[7:19]} {name} (pulled {when}, {human_bytes(verdict.image.size)})",
        )
    kept = len(verdicts) - len(remove)
    tail = ""
    if not args.dry_run:
        tail = f", {human_bytes(removed_bytes)} of images removed"
        if reclaimed is not None:
            tail += f", {human_bytes(reclaimed)} of disk reclaimed"
    emit(ctx, f"{len(remove)} image(s) {verb}, {kept} kept{tail}")
    return 0
