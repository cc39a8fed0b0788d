"""``rocmenv gc [--dry-run] [--json]``: remove containers whose rocmenv owner is gone.

Only containers labelled by rocmenv on this host are considered; one is removed when the
process that made it (``rocmenv.owner-pid``, checked against its start time so a reused
pid does not count) no longer exists. A container whose owner is alive is never touched.
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.context import Context
from rocmenv.engine import ENGINE_NAMES


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("--dry-run", action="store_true", help="only say what would be removed")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--engine", choices=ENGINE_NAMES, help="container engine")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.config import load_config
    from rocmenv.engine.gc import collect_garbage
    from rocmenv.engine.select import engine_name, open_engine

    config = load_config(ctx)
    engine = open_engine(ctx, engine_name(ctx, flag=args.engine, config=config.engine))
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
        emit(
            ctx,
            f"{what} {item.id[:12]} {item.name} ({item.state}, profile {item.profile or '?'}): {item.reason}",
        )
    emit(ctx, f"{len(removed)} container(s) {verb}, {len(items) - len(removed)} kept")
    return 0
