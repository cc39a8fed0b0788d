"""``rocmenv pull [--profile P | REF…] [--json]``: pull the locked image(s) through the engine.

Progress, retries, the disk budget and the record of what was pulled are
:mod:`rocmenv.run.pull`'s; the display is :mod:`rocmenv.run.progress`.
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.context import Context
from rocmenv.settings.choices import ENGINE_NAMES


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("refs", nargs="*", metavar="REF", help="image references to pull")
    parser.add_argument(
        "--profile", action="append", default=[], metavar="NAME",
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
        "--retry-delay", type=float, default=2.0, metavar="SECONDS",
        help="first backoff delay in seconds, doubled each time (default 2)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.container.plan import choose
    from rocmenv.engine.select import open_engine
    from rocmenv.errors import UsageError
    from rocmenv.grammar.reference import parse
    from rocmenv.run.progress import pull_with_display
    from rocmenv.run.pull import RetryPolicy
    from rocmenv.settings.resolve import Flags, settings_for

    if args.refs and args.profile:
        raise UsageError("give references or --profile, not both", hint="see `rocmenv pull -h`")
    if args.retries < 1:
        raise UsageError("--retries must be at least 1")
    flags = Flags(engine=args.engine, reserve=args.reserve)
    settings = settings_for(ctx, flags)
    images: list[str] = []
    if args.refs:  # validated before the engine; with pull-from-mirror, through the mirror
        from rocmenv.image.pinning import unpinned_reference

        images = [unpinned_reference(parse(text), settings.registry).familiar for text in args.refs]
    else:
        for i, name in enumerate(args.profile or [None]):
            profile_settings = settings_for(ctx, Flags(profile=name, engine=args.engine,
                                                   reserve=args.reserve))  # fmt: skip
            settings = profile_settings if i == 0 else settings  # the first profile's engine
            _guard, choice = choose(ctx, profile_settings)
            assert choice is not None
            images.append(choice.image)
    engine = open_engine(ctx, settings.engine)
    retry = RetryPolicy(attempts=args.retries, base_delay=args.retry_delay)
    results = [
        pull_with_display(ctx, settings, engine, image, quiet=args.json, retry=retry)
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
                        # where it came from, what crossed the network, time to present
                        "source": r.source,
                        "network_bytes": r.missing_bytes
                        if r.network_bytes is None
                        else r.network_bytes,
                        "seconds_to_present": round(r.seconds, 3),
                        "present_as": r.present_as,
                    }
                    for r in results
                ]
            },
        )
    else:
        for r in results:
            emit(ctx, r.image)
    return 0
