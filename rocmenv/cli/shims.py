"""`rocmenv shims list [--json]` and `rocmenv shims check [--image REF | --profile P] [--json]`.

``list`` JSON (``list_version`` 1)::

  {"list_version": 1,
   "shims": [{"name", "target", "distributions": [str], "specifier", "summary",
              "retire": str | null, "source": "catalogue" | "entry-point",
              "package": str | null, "entry_point": str | null, "path"}]}

``check`` JSON (``check_version`` 1): what the launcher would do in an image, read inside it
by ``probe.py`` without importing the shims' targets::

  {"check_version": 1, "image": str, "profile": str | null,
   "python": str, "rocm": str | null,
   "shims": [{"name", "target", "verdict": "would-apply" | "would-not-apply" | "unknown",
              "why": "feature-missing" | "not-installed" | "version-outside" |
                     "version-not-pep440" | "feature-present" | "probe-failed" | "unknown",
              "reason": str, "distribution": str | null, "version": str | null,
              "specifier": str, "specifier_match": bool | null,
              "static_probe": {"missing": bool | null, "reason": str}}],
   "probe": {...probe.py's full output (probe_version 1)...}}

Exit codes: 0 (both are reports), 2 bad shim file/config/reference, 4 engine failure.
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.cli._args import seconds_arg
from rocmenv.cli._common import emit, emit_json
from rocmenv.context import Context
from rocmenv.errors import EXIT_OK, UsageError
from rocmenv.settings.choices import ENGINE_NAMES
from rocmenv.settings.resolve import Settings


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    shimsub = parser.add_subparsers(dest="shims_command", metavar="SUBCOMMAND", required=True)

    p = shimsub.add_parser(
        "list", help="the shims rocmenv knows (catalogue and `rocmenv.shims` entry points)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_list)

    p = shimsub.add_parser(
        "check",
        help="which shims would apply in an image, and why (probes the image, imports nothing heavy)",
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--image", metavar="REF", help="image reference to probe")
    which.add_argument(
        "--profile", metavar="NAME", help="probe the profile's image (the lock's digest)"
    )
    p.add_argument(
        "--python", metavar="PATH", default="python3", help="interpreter in the image (python3)"
    )
    p.add_argument("--engine", choices=ENGINE_NAMES, help="container engine (default: auto)")
    p.add_argument(
        "--timeout",
        type=seconds_arg,
        default=300.0,
        metavar="SECONDS",
        help="seconds for the probe (default 300)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_check)


def run_list(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.shims.catalogue import discover_shims

    shims = discover_shims()
    if args.json:
        emit_json(ctx, {"list_version": 1, "shims": [s.to_json() for s in shims]})
        return EXIT_OK
    if not shims:
        emit(ctx, "no shims")
        return EXIT_OK
    for s in shims:
        origin = "catalogue" if s.source == "catalogue" else f"entry point of {s.package}"
        emit(ctx, f"{s.name}  ({origin})")
        emit(ctx, f"  target:        {s.target}")
        emit(ctx, f"  distributions: {', '.join(s.distributions)}")
        emit(ctx, f"  versions:      {s.specifier}")
        emit(ctx, f"  what:          {s.summary.replace('``', '')}")
        if s.retire:
            emit(ctx, f"  retire:        {s.retire.replace('``', '')}")
    return EXIT_OK


def _image_and_engine(
    args: argparse.Namespace, ctx: Context
) -> tuple[str, str | None, Any, Settings]:
    from rocmenv.container.plan import choose
    from rocmenv.engine.select import open_engine
    from rocmenv.settings.resolve import Flags, settings_for

    if args.image:
        from rocmenv.grammar.reference import parse

        ref = parse(args.image)  # raises InvalidReference (exit 2): nothing unvalidated runs
        settings = settings_for(ctx, Flags(engine=args.engine))
        return ref.familiar, None, open_engine(ctx, settings.engine), settings
    settings = settings_for(ctx, Flags(profile=args.profile, engine=args.engine))
    _guard, choice = choose(ctx, settings)
    assert choice is not None
    return choice.image, settings.profile.name, open_engine(ctx, settings.engine), settings


def run_check(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.engine.container import EngineCapture
    from rocmenv.shims.bundle import prepare_launcher
    from rocmenv.shims.probe import check_image_versions, classify

    image, profile_name, engine, settings = _image_and_engine(args, ctx)
    if not image:
        raise UsageError("no image to check", hint="pass --image REF or --profile NAME")
    bundle = prepare_launcher(ctx)
    local = image  # the engine's name for it: the id when the runner image cache loaded it
    if not engine.image_exists(image):
        from rocmenv.run.progress import pull_with_display

        pulled = pull_with_display(ctx, settings, engine, image, quiet=args.json)
        local = pulled.present_as or image
    probe = check_image_versions(
        EngineCapture(engine), local, bundle=bundle, python=args.python, timeout=args.timeout
    )
    rows: list[dict[str, Any]] = []
    for shim in probe["shims"]:
        verdict, why = classify(shim)
        rows.append(
            {
                "name": shim["name"],
                "target": shim["target"],
                "verdict": verdict,
                "why": why,
                "reason": shim["reason"],
                "distribution": shim["distribution"],
                "version": shim["version"],
                "specifier": shim["specifier"],
                "specifier_match": shim["specifier_match"],
                "static_probe": shim["static_probe"],
            }
        )
    if args.json:
        emit_json(
            ctx,
            {
                "check_version": 1,
                "image": image,
                "profile": profile_name,
                "python": probe["python"]["version"],
                "rocm": probe["rocm"]["version"],
                "shims": rows,
                "probe": probe,
            },
        )
        return EXIT_OK
    rocm = probe["rocm"]["version"] or "unknown"
    emit(ctx, f"{image}: Python {probe['python']['version']}, ROCm {rocm}")
    if not rows:
        emit(ctx, "  no shims")
    width = max((len(r["name"]) for r in rows), default=0)
    for r in rows:
        emit(ctx, f"  {r['name']:<{width}}  {r['verdict']:<15}  {r['reason']}")
    return EXIT_OK
