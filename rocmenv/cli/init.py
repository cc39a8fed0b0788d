"""``rocmenv init [--from-workflow FILE [--job JOB]] [--image REF] [--profile NAME] [--force]``:
write ``rocmenv.toml`` at the checkout's top level from a workflow's job (container, env, the
suite it runs) and the tests' registration calls, then print the workflow that replaces the
job (a plan job and the suite's matrix; every action pinned by commit).

Exit codes: 0 written; 2 the file exists (without ``--force``), a flag the profile cannot
express, an unreadable workflow or registration (named ``file:line``), no image.
``--json``: ``{"path", "profile", "suites": [{"name", "gpus", "files", "disabled"}],
"suite", "labels", "untrusted", "steps", "notes"}`` (``suite``: the one the steps run;
``labels``: which label policy was written, or null; ``untrusted``: why untrusted mode would
refuse the profile, or null).
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.context import Context

DESCRIPTION = (
    "Write rocmenv.toml in one step: a profile (default ci) from a workflow job's "
    "container.options, image and env, one [suites.NAME] per suite the tests register with "
    "register_rocm_ci/register_amd_ci (read from the files with the function's real "
    "signature, never imported), and the client's [labels] policy; then print the workflow "
    "that replaces the job."
)


def add_parser(sub: Any, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=DESCRIPTION)
    p.add_argument("--from-workflow", metavar="FILE", help="a GitHub Actions workflow")
    p.add_argument("--job", metavar="JOB", help="its job (default: the one with a container)")
    p.add_argument("--image", metavar="REF", help="the image (default: the job's container.image)")
    p.add_argument("--profile", metavar="NAME", default="ci", help="the profile's name (ci)")
    p.add_argument("--force", action="store_true", help="replace an existing rocmenv.toml")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from pathlib import Path

    from rocmenv.adopt.init import InitRequest, init_project
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.context import find_checkout
    from rocmenv.errors import UsageError

    if args.job and not args.from_workflow:
        raise UsageError("--job names a job of --from-workflow FILE")
    workflow = None
    if args.from_workflow:
        workflow = Path(args.from_workflow)
        workflow = workflow if workflow.is_absolute() else ctx.cwd / workflow
    result = init_project(
        ctx,
        InitRequest(
            root=find_checkout(ctx.cwd), workflow=workflow, job=args.job, image=args.image,
            profile=args.profile, force=args.force,
        ),
    )  # fmt: skip
    suites = [
        {"name": s.name, "gpus": s.gpus, "files": len(s.files), "disabled": s.disabled}
        for s in result.suites
    ]
    if args.json:
        emit_json(ctx, {"path": str(result.path), "profile": args.profile, "suites": suites,
                        "suite": result.suite, "labels": result.labels,
                        "untrusted": result.untrusted, "steps": result.steps,
                        "notes": list(result.notes)})  # fmt: skip
        return 0
    for note in result.notes:
        ctx.stderr.write(f"rocmenv init: note: {note}\n")
    emit(ctx, f"wrote {result.path}: profile {args.profile}, {len(suites)} suite(s)")
    for s in suites:
        gpus = s["gpus"] if s["gpus"] is not None else "? (set gpus)"
        off = f", {s['disabled']} disabled" if s["disabled"] else ""
        emit(ctx, f"  [suites.{s['name']}]  gpus={gpus}  {s['files']} file(s){off}")
    emit(ctx, f"  [labels]  {result.labels}" if result.labels else "  no [labels]: no test is "
         "labelled")  # fmt: skip
    if result.untrusted:
        emit(ctx, f"  untrusted mode (a fork's PR) would refuse profile {args.profile}: "
             f"{result.untrusted}")  # fmt: skip
    emit(ctx)
    emit(ctx, f"The workflow for the job, running suite {result.suite} (the matrix from "
         "`suite plan`, the PR's labels, actions pinned by commit):")  # fmt: skip
    emit(ctx)
    ctx.stdout.write(result.steps)
    return 0
