"""``rocmenv bootstrap``: prepare the CI job container this runs in (see rocmenv.bootstrap).

stdout carries only machine output (``export`` lines, or the JSON document with ``--json``);
the one-line-per-step summary goes to stderr. Exit codes: 0 ok; 1 a step failed (GPU never
ready, a stale process survived, fetch/patch/install failed); 2 usage (bad ref, bad flags,
missing patch file, unwritable report/launcher directory).
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.cli._args import seconds_arg
from rocmenv.context import Context

DESCRIPTION = (
    "Prepare the CI job container this runs in: wait for the GPUs, end stale Ray/SGLang "
    "processes, install the shim launcher and export PYTHONPATH, apply SGLang/Megatron "
    "overrides (ci-sglang-pr: / ci-megatron-pr: lines of a PR body), and report the "
    "environment. Runs with the container's Python and the standard library."
)
EPILOG = (
    "Exit codes: 0 ok; 1 a step failed; 2 usage (bad ref, bad flag, missing patch). "
    "Override refs: #N (refs/pull/N/head), a branch or tag, or a 7-40 digit commit. "
    "PR body lines: 'ci-sglang-pr: #123', 'ci-megatron-pr: my-branch' (last one wins)."
)


def add_parser(sub: Any, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=DESCRIPTION, epilog=EPILOG)
    out = p.add_argument_group("output")
    out.add_argument("--report", metavar="FILE", help="write the JSON report to FILE")
    out.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    out.add_argument(
        "--export", choices=("auto", "github-env", "shell", "none"), default="auto",
        help="how PYTHONPATH reaches later steps (auto: $GITHUB_ENV if set, else "
        "'export' lines on stdout for eval)",
    )  # fmt: skip
    gpu = p.add_argument_group("GPU wait")
    gpu.add_argument("--no-gpu-wait", action="store_true", help="don't wait for the GPUs")
    gpu.add_argument(
        "--gpu-timeout", type=seconds_arg, default=120.0, metavar="SECONDS",
        help="give up after this many seconds (default 120)",
    )  # fmt: skip
    gpu.add_argument(
        "--gpu-tools", metavar="LIST", default="rocm-smi,amd-smi,rocminfo",
        help="tools to try, first found on PATH is used (default rocm-smi,amd-smi,rocminfo)",
    )  # fmt: skip
    gpu.add_argument(
        "--expect-gpus", type=int, default=1, metavar="N",
        help="ready means at least N GPUs (default 1)",
    )  # fmt: skip
    procs = p.add_argument_group("stale processes")
    procs.add_argument(
        "--no-reap", action="store_true", help="don't end stale Ray/SGLang processes"
    )
    procs.add_argument(
        "--reap-grace", type=seconds_arg, default=5.0, metavar="SECONDS",
        help="seconds between SIGTERM and SIGKILL (default 5)",
    )  # fmt: skip
    procs.add_argument("--proc-root", metavar="DIR", default="/proc", help=argparse.SUPPRESS)
    shims = p.add_argument_group("shims")
    shims.add_argument("--no-shims", action="store_true", help="don't install the shim launcher")
    shims.add_argument(
        "--launcher-dir", metavar="DIR", default=None,
        help="where to install the launcher (default /opt/rocmenv/launcher)",
    )  # fmt: skip
    ov = p.add_argument_group("dependency overrides")
    ov.add_argument(
        "--pr-body", metavar="FILE",
        help="read ci-sglang-pr:/ci-megatron-pr: lines from FILE ('-': stdin; default: "
        "$ROCMENV_PR_BODY)",
    )  # fmt: skip
    ov.add_argument("--sglang-pr", metavar="REF", help="#N, branch/tag, or commit of SGLang")
    ov.add_argument("--megatron-pr", metavar="REF", help="#N, branch/tag, or commit of Megatron-LM")
    ov.add_argument("--sglang-path", metavar="PATH", help="SGLang checkout (/sgl-workspace/sglang)")
    ov.add_argument(
        "--megatron-path", metavar="PATH", help="Megatron-LM checkout (/root/Megatron-LM)"
    )
    ov.add_argument(
        "--sglang-subdir", metavar="DIR", help="project dir inside the checkout (python)"
    )
    ov.add_argument("--megatron-subdir", metavar="DIR", help="project dir inside the checkout (.)")
    ov.add_argument("--remote", default="origin", help="git remote to fetch from (origin)")
    ov.add_argument(
        "--patch", action="append", default=[], metavar="[sglang=|megatron=]FILE",
        help="apply FILE (git apply; skipped when already applied); repeatable",
    )  # fmt: skip
    ov.add_argument("--python", metavar="PATH", help="Python for pip install -e (this one)")
    ov.add_argument(
        "--pip-arg", action="append", default=[], metavar="ARG",
        help="extra argument for pip install (e.g. --pip-arg=--no-build-isolation)",
    )  # fmt: skip
    ov.add_argument("--git-timeout", type=seconds_arg, default=600.0, help=argparse.SUPPRESS)
    ov.add_argument("--install-timeout", type=seconds_arg, default=1800.0, help=argparse.SUPPRESS)
    p.add_argument("--sysfs-root", default="/sys", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def _pr_body(args: argparse.Namespace, ctx: Context) -> tuple[str | None, str]:
    from rocmenv.errors import UsageError

    if args.pr_body is None:
        return ctx.env.get("ROCMENV_PR_BODY"), "env"
    if args.pr_body == "-":
        try:
            return ctx.stdin.read(), "pr-body"
        except (OSError, UnicodeDecodeError) as err:
            raise UsageError(
                f"cannot read the PR body from stdin: {err}",
                hint="pipe UTF-8 text, or give --pr-body FILE",
            ) from None
    from pathlib import Path

    path = Path(args.pr_body)
    path = path if path.is_absolute() else ctx.cwd / path
    try:
        return path.read_text(encoding="utf-8", errors="replace"), "pr-body"
    except OSError as err:
        raise UsageError(
            f"cannot read the PR body {path}: {err}", hint="--pr-body FILE, or - for stdin"
        ) from None


def build_options(args: argparse.Namespace, ctx: Context) -> Any:
    """BootstrapOptions from the command line (validates everything: UsageError)."""
    import sys
    from pathlib import Path

    from rocmenv.bootstrap.gpuwait import GpuWaitOptions
    from rocmenv.bootstrap.refs import Target, make_plan, parse_pr_body
    from rocmenv.bootstrap.steps import BootstrapOptions
    from rocmenv.errors import UsageError

    tools = tuple(t.strip() for t in args.gpu_tools.split(",") if t.strip())
    if not tools:
        raise UsageError("--gpu-tools is empty", hint="e.g. --gpu-tools rocm-smi,rocminfo")
    if args.expect_gpus < 1:
        raise UsageError("--expect-gpus must be at least 1")
    refs: dict[Target, tuple[str, str]] = {}
    body, source = _pr_body(args, ctx)
    if body:
        for target, value in parse_pr_body(body).items():
            refs[target] = (value, source)
    if args.sglang_pr:
        refs["sglang"] = (args.sglang_pr, "flag")
    if args.megatron_pr:
        refs["megatron"] = (args.megatron_pr, "flag")
    paths: dict[Target, str] = {}
    subdirs: dict[Target, str] = {}
    if args.sglang_path:
        paths["sglang"] = args.sglang_path
    if args.megatron_path:
        paths["megatron"] = args.megatron_path
    if args.sglang_subdir:
        subdirs["sglang"] = args.sglang_subdir
    if args.megatron_subdir:
        subdirs["megatron"] = args.megatron_subdir
    python = args.python or sys.executable
    plan = make_plan(
        refs=refs,
        patches=args.patch,
        paths=paths,
        subdirs=subdirs,
        cwd=ctx.cwd,
        remote=args.remote,
        python=python,
        pip_args=args.pip_arg,
        git_timeout=args.git_timeout,
        install_timeout=args.install_timeout,
    )
    launcher_dir = args.launcher_dir
    if launcher_dir is None:
        from rocmenv.launcher import CONTAINER_DIR

        launcher_dir = CONTAINER_DIR
    return BootstrapOptions(
        gpu_wait=not args.no_gpu_wait,
        gpu=GpuWaitOptions(timeout=args.gpu_timeout, tools=tools, expect=args.expect_gpus),
        reap=not args.no_reap,
        reap_grace=args.reap_grace,
        proc_root=Path(args.proc_root),
        shims=not args.no_shims,
        launcher_dir=Path(launcher_dir),
        export=args.export,
        json_output=args.json,
        overrides=plan,
        python=python,
        sysfs_root=Path(args.sysfs_root),
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.bootstrap.steps import append_step_summary, run_bootstrap, write_report
    from rocmenv.cli._common import emit, emit_json

    options = build_options(args, ctx)
    result = run_bootstrap(ctx, options)
    for step in result.steps:
        ctx.stderr.write(f"rocmenv bootstrap: {step.line()}\n")
    if args.report:
        from pathlib import Path

        path = Path(args.report)
        write_report(path if path.is_absolute() else ctx.cwd / path, result, within=ctx.checkout)
    append_step_summary(ctx, result)
    if args.json:
        emit_json(ctx, result.redacted_json())
    else:
        for line in result.export.shell_lines:
            emit(ctx, line)
    if result.export.method == "github-env":
        ctx.stderr.write(
            f"rocmenv bootstrap: exported {', '.join(result.export.values)} via $GITHUB_ENV\n"
        )
    ctx.stderr.flush()
    if result.error is not None:
        raise result.error
    return 0
