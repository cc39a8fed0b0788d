"""Argument groups shared by several commands."""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.settings.choices import FAMILIES


def seconds_arg(text: str) -> float:
    """An argparse type for durations: a finite number of seconds from 0 to a day (nan would
    never time out, inf never end)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    if not value <= 86400:  # also false for nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds up to 86400")
    return value


def add_constraint_args(parser: Any) -> None:
    group = parser.add_argument_group("tag constraints")
    group.add_argument(
        "--sglang", metavar="SPEC", help="SGLang version or PEP 440 specifier (e.g. '>=0.5.8')"
    )
    group.add_argument(
        "--rocm", metavar="X.Y[.Z]", help="ROCm version (7.2 matches rocm720 and rocm72x)"
    )
    from rocmenv.grammar.tags import gpu_aliases_text

    group.add_argument(
        "--gpu",
        metavar="FAMILY",
        help=f"GPU family as the tags name it: {gpu_aliases_text()}; or a gfx target",
    )
    group.add_argument(
        "--family",
        choices=FAMILIES,
        help="tag family (default: nightly, then release, then date-only)",
    )
    group.add_argument("--before", metavar="YYYYMMDD", help="only tags dated before this day")
    group.add_argument(
        "--project",
        metavar="NAME",
        default="sglang",
        help="whose builds: sglang (default), miles, latest, … or 'any'",
    )


def constraints_from(args: argparse.Namespace) -> Any:
    import re

    from rocmenv.errors import UsageError
    from rocmenv.grammar.tags import (
        ROCM_CONSTRAINT,
        Constraints,
        constraint_problem,
        sglang_specifier,
    )

    if args.before is not None and not re.fullmatch(r"20[0-9]{6}", args.before):
        raise UsageError(
            f"--before {args.before!r} is not a date", hint="use YYYYMMDD, e.g. --before 20260301"
        )
    if args.rocm is not None and not ROCM_CONSTRAINT.fullmatch(args.rocm):
        raise UsageError(
            f"--rocm {args.rocm[:80]!r} is not a ROCm version",
            hint="use X.Y or X.Y.Z, e.g. --rocm 7.2",
        )
    if args.gpu is not None and constraint_problem("gpu", args.gpu) is not None:
        raise UsageError(
            f"--gpu {args.gpu[:80]!r} is not a GPU family",
            hint="use mi30x or mi35x (or mi300x, mi325x, mi355x, …) or a gfx target such as gfx942",
        )
    if args.sglang is not None:
        sglang_specifier(args.sglang)  # validates
    project = None if args.project == "any" else args.project
    return Constraints(
        sglang=args.sglang,
        rocm=args.rocm,
        gpu=args.gpu.lower() if args.gpu else None,
        family=args.family,
        before=args.before,
        project=project,
    )


def has_constraints(args: argparse.Namespace) -> bool:
    return (
        any(getattr(args, k) is not None for k in ("sglang", "rocm", "gpu", "family", "before"))
        or args.project != "sglang"
    )
