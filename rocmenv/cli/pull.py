"""``rocmenv pull [--profile P | REF…] [--json]``: pull the locked image(s) through the engine.

Progress, retries, the disk budget and the record of what was pulled are
:mod:`rocmenv.run.pull`'s; the display is :mod:`rocmenv.cli._progress`.
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.context import Context
from rocmenv.engine import ENGINE_NAMES


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("refs", nargs="*", metavar="REF", help="image references to pull")
    parser.add_argument(
        "-p", "--profile", action="append", default=[], metavar="NAME",
        help="pull the profile's image (the locked digest when pinned); repeatable",
    )  # fmt: skip
    parser.add_argument("--engine", choices=ENGINE_NAMES, help="container engine")
    parser.add_argument(
        "--reserve", metavar="SIZE",
        help="free space that must remain after the pull (default: ROCMENV_DISK_RESERVE or 2g)",
    )  # fmt: skip
    parser.add_argument(
        "--retries", type=int, default=5, metavar="N", help="attempts per image (default 5)"
    )
    parser.add_argument(
        "--retry-delay", type=float, default=2.0, metavar="S",
        help="first backoff delay in seconds, doubled each time (default 2)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.cli._progress import pull_for_cli
    from rocmenv.engine.select import engine_name, open_engine
    from rocmenv.errors import UsageError
    from rocmenv.grammar.reference import parse
    from rocmenv.run.pull import RetryPolicy, parse_size
    from rocmenv.settings.project import load_config

    if args.refs and args.profile:
        raise UsageError("give references or --profile, not both", hint="see `rocmenv pull -h`")
    if args.retries < 1:
        raise UsageError("--retries must be at least 1")
    config = load_config(ctx)
    images: list[str] = []
    profile_engine = None
    if args.refs:
        images = [parse(text).familiar for text in args.refs]  # validated before the engine
    else:
        from rocmenv.image.pinning import choose_image

        for name in args.profile or [None]:
            profile = config.profile(name)
            profile_engine = profile_engine or profile.engine
            images.append(choose_image(ctx, config, profile).image)
    engine = open_engine(
        ctx, engine_name(ctx, flag=args.engine, profile=profile_engine, config=config.engine)
    )
    reserve = parse_size(args.reserve) if args.reserve else None
    retry = RetryPolicy(attempts=args.retries, base_delay=args.retry_delay)
    results = [
        pull_for_cli(ctx, engine, image, quiet=args.json, reserve=reserve, retry=retry)
        for image in dict.fromkeys(images)  # two profiles on one image: one pull
    ]
    if args.json:
        emit_json(
            ctx,
            {
                "pulled": [
                    {
                        "image": r.image,
                        "bytes": r.total_bytes,
                        "downloaded": r.missing_bytes,
                        "seconds": round(r.seconds, 3),
                        "attempts": r.attempts,
                    }
                    for r in results
                ]
            },
        )
    else:
        for r in results:
            emit(ctx, r.image)
    return 0
