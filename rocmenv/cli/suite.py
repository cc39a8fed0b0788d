"""``rocmenv suite list|plan|run``: test suites across GPU slots (local packing or Slurm).

``list`` JSON: ``{"suites": [{"name", "profile", "tests": [{"name", "path", "gpus",
"est_time", "estimate", "timeout", "retries", "source", "labels", "nightly", "disabled",
"command", "registration"}], "deselected": [{"name", "why"}]}]}`` (``disabled``: the reason,
or null). ``plan`` JSON: ``{"suite", "partitions": [{"index", "estimated_seconds", "tests":
[{"name", "gpus", "estimate", "declared", "source", "runs"}]}], "disabled": [{"name",
"reason"}], "reference_worst_seconds", "notices"}``; ``--format gha-matrix``: ``{"include":
[...]}`` (at most one entry per test; one entry of 0 tests when nothing is selected), also
written as the ``matrix`` output, with ``has-tests`` (``true``/``false``), to
``$GITHUB_OUTPUT`` inside GitHub Actions. ``run`` JSON: see
:func:`rocmenv.suite.report.to_json`. What the selection could not use (a PR label not the
policy's, a label no test carries) and why nothing was selected are notices, never errors.

Exit codes: 0 every test passed (also: nothing selected, or an empty partition), 1 a test
failed (or errored, or was cancelled), 2 bad suite/config/flags (including a test needing
more GPUs than the pool, before anything starts), 4 engine unavailable, 130 interrupted
(every test's container stopped and removed).
"""

from __future__ import annotations

import argparse
from typing import Any

from rocmenv.cli._common import emit, emit_json
from rocmenv.context import Context
from rocmenv.errors import EXIT_CHECK_FAILED, EXIT_INTERRUPTED, EXIT_OK, UsageError
from rocmenv.settings.choices import ENGINE_NAMES

UNTRUSTED_HELP = (
    "code from an untrusted source (a fork's PR): every test's container must satisfy the "
    "untrusted policy, the checkout's [slurm] is ignored; ROCMENV_UNTRUSTED=1 does the same"
)
DECLARED_HELP = "plan from declared estimates only, not learned ones (same plan in every job)"
PROFILE_HELP = "run every test with this profile instead of the suite's (e.g. a local variant)"


def add_selection_args(p: Any) -> None:
    """--cadence, --labels, --all-labels, --profile: the same on list, plan and run."""
    from rocmenv.suite.labels import CADENCES

    p.add_argument(
        "--cadence", choices=CADENCES, default="regular",
        help="regular (default): tests registered nightly=True are left out; nightly, weekly: "
        "they run",
    )  # fmt: skip
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--labels", metavar="A,B",
        help="the pull request's label names (run-ci-amd,run-ci-all): unlabelled tests run, "
        "and those with a label these include, as the project's [labels] policy reads them "
        "(without one: the suite's include-labels, else every test)",
    )  # fmt: skip
    group.add_argument("--all-labels", action="store_true", help="keep every labelled test")
    p.add_argument("--profile", metavar="NAME", help=PROFILE_HELP)


def selection(args: argparse.Namespace) -> Any:
    from rocmenv.suite.select import selection_of

    return selection_of(args.cadence, args.labels, args.all_labels)


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    suitesub = parser.add_subparsers(dest="suite_command", metavar="SUBCOMMAND", required=True)

    p = suitesub.add_parser("list", help="the suites of the project and their tests")
    p.add_argument("name", nargs="?", metavar="NAME", help="one suite (default: all)")
    add_selection_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_list)

    p = suitesub.add_parser("plan", help="split a suite into N partitions balanced by estimate")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--partitions", type=int, metavar="N", help="how many (default 1)")
    p.add_argument(
        "--max-partition-time", type=float, metavar="SECONDS",
        help="instead of --partitions: the fewest partitions whose worst is at most this",
    )  # fmt: skip
    p.add_argument("--declared", action="store_true", help=DECLARED_HELP)
    add_selection_args(p)
    p.add_argument(
        "--format", choices=("text", "json", "gha-matrix"), default=None,
        help="gha-matrix: {\"include\": [one entry per partition]} for a workflow's matrix "
        "(also the `matrix` output in GitHub Actions)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="machine-readable output (--format json)")
    p.set_defaults(func=run_plan)

    p = suitesub.add_parser("run", help="run a suite, each test in its own container")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--partition", metavar="I/N", help="only partition I of N (0-based)")
    p.add_argument("--gpus", metavar="SEL", help="the GPU pool: all (default) | 0-3 | 0,2,4 | …")
    p.add_argument("--max-parallel", type=int, metavar="K", help="at most K tests at once")
    p.add_argument("--fail-fast", action="store_true", help="stop everything at the first failure")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML here")
    p.add_argument("--markdown", metavar="FILE", help="append a markdown summary here")
    p.add_argument(
        "--log-dir",
        metavar="DIR",
        help="per-test logs (default rocmenv-suite-logs/NAME; untrusted: $RUNNER_TEMP/"
        "rocmenv-suite-logs/NAME, else $XDG_STATE_HOME/rocmenv/suite-logs/NAME)",
    )
    p.add_argument("--backend", choices=("local", "slurm"), default="local", help="where tests run")
    p.add_argument("--engine", choices=ENGINE_NAMES, help="container engine (default: auto)")
    p.add_argument("--no-learn", action="store_true", help="don't record the measured times")
    p.add_argument("--untrusted", action="store_true", help=UNTRUSTED_HELP)
    p.add_argument("--declared", action="store_true", help=DECLARED_HELP)
    add_selection_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run_run)

    p = suitesub.add_parser(
        "slurm-exec",
        help="(inside a Slurm job, as --backend slurm runs it) a test's container on exactly "
        "the allocated GPUs",
    )
    p.add_argument("--profile", metavar="NAME")
    p.add_argument("--engine", choices=ENGINE_NAMES)
    p.add_argument("--gres-conf", metavar="FILE")
    p.add_argument("--no-gpus", action="store_true", help="the test asked for no GPUs")
    p.add_argument("--untrusted", action="store_true", help=UNTRUSTED_HELP)
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=run_slurm_exec, access_check=None, on_exit=None)

    p = suitesub.add_parser(
        "slurm-warm",
        help="(inside a Slurm allocation, as --backend slurm runs it) the node-side runner the "
        "suite's job steps hand their tests to",
    )
    p.add_argument("--socket-dir", metavar="DIR", required=True)
    p.add_argument("--untrusted", action="store_true", help="run only untrusted steps")
    p.set_defaults(func=run_slurm_warm)


def run_list(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import notice
    from rocmenv.escape import shown
    from rocmenv.settings.resolve import Flags
    from rocmenv.suite.runner import list_names, load, planned
    from rocmenv.suite.select import notices_of, select

    chosen_selection = selection(args)
    names = [args.name] if args.name else list_names(ctx)
    suites: list[dict[str, Any]] = []
    for name in names:
        loaded = load(ctx, name, Flags(profile=args.profile))
        by_name = {p.name: p for p in planned(loaded, selection=chosen_selection)}
        chosen = select(loaded.suite, chosen_selection)
        suite = loaded.suite
        suites.append(
            {
                "name": name,
                "profile": loaded.profile,
                "tests": [
                    {
                        "name": t.name,
                        "path": t.path,
                        "gpus": t.gpus,
                        "est_time": t.est_time,
                        "estimate": round(
                            by_name[t.name].seconds if t.name in by_name else suite.declared(t), 3
                        ),
                        "timeout": round(suite.timeout(t), 3),
                        "retries": t.policy.retries,
                        "source": t.source,
                        "labels": list(t.labels),
                        "nightly": t.nightly,
                        "disabled": t.disabled,
                        "command": list(t.command),
                        "registration": _jsonable(t.registration),
                    }
                    for t in (*chosen.run, *chosen.disabled)
                ],
                "deselected": [{"name": t.name, "why": why} for t, why in chosen.deselected],
                "notices": notices_of(loaded.suite, chosen),
            }
        )
    if args.json:
        emit_json(ctx, {"suites": suites})
        return EXIT_OK
    if not suites:
        ctx.stderr.write("rocmenv suite list: no [suites.NAME] in the configuration\n")
    for text in (n for s in suites for n in s["notices"]):
        notice(ctx, text)
    for s in suites:
        left_out = f", {len(s['deselected'])} left out" if s["deselected"] else ""
        emit(ctx, f"{s['name']} (profile {s['profile']}, {len(s['tests'])} tests{left_out})")
        for t in s["tests"]:
            labels = f"  [{', '.join(map(shown, t['labels']))}]" if t["labels"] else ""
            extra = "  nightly" if t["nightly"] else ""
            extra += f"  DISABLED: {shown(t['disabled'])}" if t["disabled"] else ""
            emit(
                ctx,
                f"  {shown(t['name'])}  gpus={t['gpus']}  est={t['estimate']:.0f}s  "
                f"timeout={t['timeout']:.0f}s{labels}{extra}",
            )
    return EXIT_OK


def _jsonable(values: Any) -> dict[str, Any]:
    """A registration's literal values as JSON (tuples, sets, bytes, complex: as text)."""
    import json

    out = {}
    for key, value in dict(values).items():
        try:
            json.dumps(value)
            out[key] = value
        except (TypeError, ValueError):
            out[key] = repr(value)
    return out


def run_plan(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import gha_output, notice
    from rocmenv.errors import UsageError
    from rocmenv.escape import shown
    from rocmenv.settings.resolve import Flags
    from rocmenv.suite.plan import (
        gha_matrix,
        partitions,
        partitions_for_time,
        plan_json,
        reference_partitions,
    )
    from rocmenv.suite.runner import load, planned
    from rocmenv.suite.select import notices_of, select

    fmt = args.format or ("json" if args.json else "text")
    if args.partitions is not None and args.max_partition_time is not None:
        raise UsageError("give --partitions or --max-partition-time, not both")
    chosen_selection = selection(args)
    loaded = load(ctx, args.name, Flags(profile=args.profile))
    tests = planned(loaded, declared=args.declared, selection=chosen_selection)
    count = args.partitions or 1
    if args.max_partition_time is not None:
        count = partitions_for_time(tests, args.max_partition_time)
    chosen = select(loaded.suite, chosen_selection)
    notices = notices_of(loaded.suite, chosen)
    for text in notices:
        notice(ctx, text)
    disabled = chosen.disabled
    if fmt == "gha-matrix":
        import json

        # one job per test at most, and one (which runs nothing, green) when none is selected:
        # GitHub refuses an empty matrix, and a run refuses none of these entries
        matrix = gha_matrix(partitions(tests, max(1, min(count, len(tests)))))
        emit(ctx, json.dumps(matrix, sort_keys=True))
        gha_output(ctx, {"matrix": json.dumps(matrix, sort_keys=True),
                         "has-tests": "true" if tests else "false"})  # fmt: skip
        return EXIT_OK
    parts = partitions(tests, count)
    reference = max(p.seconds for p in reference_partitions(tests, count))
    if fmt == "json":
        emit_json(
            ctx,
            {
                "suite": args.name,
                "partitions": plan_json(parts),
                "disabled": [{"name": t.name, "reason": t.disabled} for t in disabled],
                "reference_worst_seconds": round(reference, 3),
                "notices": notices,
            },
        )
        return EXIT_OK
    for part in parts:
        emit(
            ctx,
            f"partition {part.index}/{len(parts)}: {part.seconds:.0f}s estimated, {len(part.tests)} tests",
        )
        for t in part.tests:
            how = t.estimate.source
            learned = (
                f" (declared {t.estimate.declared:.0f}s, {t.estimate.runs} runs)"
                if how == "learned"
                else ""
            )
            emit(ctx, f"  {shown(t.name)}  gpus={t.gpus}  est={t.seconds:.0f}s {how}{learned}")
    worst = max(p.seconds for p in parts)
    emit(ctx, f"worst partition {worst:.0f}s (longest-first reference split: {reference:.0f}s)")
    for off in disabled:
        emit(ctx, f"skipped, disabled: {shown(off.name)}: {shown(off.disabled or '')}")
    return EXIT_OK


def run_run(args: argparse.Namespace, ctx: Context) -> int:
    import threading
    from pathlib import Path

    from rocmenv.settings.resolve import Flags
    from rocmenv.suite.plan import parse_partition
    from rocmenv.suite.report import table, to_json
    from rocmenv.suite.runner import SuiteRunRequest, run_suite

    request = SuiteRunRequest(
        name=args.name,
        partition=parse_partition(args.partition) if args.partition else None,
        gpus=args.gpus,
        max_parallel=args.max_parallel,
        fail_fast=args.fail_fast,
        backend=args.backend,
        flags=Flags(engine=args.engine, untrusted=args.untrusted, profile=args.profile),
        log_dir=Path(args.log_dir) if args.log_dir else None,
        learn=not args.no_learn,
        declared=args.declared,
        selection=selection(args),
    )
    stop = threading.Event()
    printer = _EventPrinter(ctx)
    try:
        with _stop_on_signals(stop):
            report = run_suite(ctx, request, stop, printer)
    finally:
        printer.close()
    from rocmenv.cli._common import notice, warn

    for text in report.warnings:
        warn(ctx, text)
    for text in report.notices:
        notice(ctx, text)
    if report.log_dir:
        from rocmenv.escape import shown

        ctx.stderr.write(f"rocmenv suite: per-test logs in {shown(report.log_dir)}\n")
    failed_write = _write_reports(args, ctx, report)
    if failed_write is not None and args.json:
        raise failed_write  # one JSON document: the error
    if args.json:
        emit_json(ctx, to_json(report))
    else:
        for line in table(report):
            emit(ctx, line)
    if failed_write is not None:
        raise failed_write
    if report.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if report.passed else EXIT_CHECK_FAILED


def _write_reports(args: argparse.Namespace, ctx: Context, report: Any) -> UsageError | None:
    """``--junit`` and ``--markdown`` (or ``$GITHUB_STEP_SUMMARY``), never through a link the
    checkout planted; what could not be written is returned for the caller to raise."""
    from rocmenv.hostfs import LinkRefused
    from rocmenv.suite.junit import junit_xml
    from rocmenv.suite.report import append_text, markdown, write_text

    summary = args.markdown or (
        ctx.env.get("GITHUB_STEP_SUMMARY") if ctx.in_github_actions else None
    )
    try:
        if args.junit:
            write_text(_path(ctx, args.junit), junit_xml(report), within=ctx.checkout)
        if summary:
            append_text(_path(ctx, summary), markdown(report), within=ctx.checkout)
    except LinkRefused as err:
        return UsageError(str(err), hint="remove the link, or name another file")
    except OSError as err:
        return UsageError(
            f"cannot write {err.filename}: {err.strerror}", hint="name a writable file"
        )
    return None


def _path(ctx: Context, text: str) -> Any:
    from pathlib import Path

    p = Path(text)
    return p if p.is_absolute() else ctx.cwd / p


class _EventPrinter:
    """One line per event on stderr; on a terminal (outside GitHub Actions) also a status
    line under them: what runs where, and for how long."""

    def __init__(self, ctx: Context) -> None:
        import time

        self.ctx = ctx
        self.board = ctx.stderr_is_tty and not ctx.in_github_actions
        self.running: dict[str, tuple[str, float]] = {}
        self.done: dict[str, int] = {}
        self.clock = time.monotonic

    def __call__(self, event: Any) -> None:
        from rocmenv.escape import shown

        on = ",".join(str(g) for g in event.assigned) or "-"
        if event.kind == "start":
            again = f" (attempt {event.attempt})" if event.attempt > 1 else ""
            line = f"rocmenv suite: start {event.name}{again} on GPUs {on}"
            self.running[event.name] = (on, self.clock())
        elif event.kind == "retry":
            r = event.result
            line = (
                f"rocmenv suite: {r.status} {event.name} (attempt {event.attempt}) in "
                f"{r.attempts[-1].wall:.1f}s, exit {r.exit_code}: retrying"
            )
            self.running.pop(event.name, None)
        else:
            r = event.result
            code = f", exit {r.exit_code}" if r.exit_code is not None else ""
            why = f": {r.message.splitlines()[0]}" if r.message and r.status != "passed" else ""
            line = (
                f"rocmenv suite: {r.status} {event.name} on GPUs {on} in {r.wall:.1f}s{code}{why}"
            )
            self.running.pop(event.name, None)
            self.done[r.status] = self.done.get(r.status, 0) + 1
        line = shown(line)  # the test's name and message are the checkout's and the engine's
        if self.board:
            line = "\r\x1b[K" + line
        self.ctx.stderr.write(line + "\n")
        if self.board:
            self.ctx.stderr.write(self.status())
        self.ctx.stderr.flush()

    def status(self) -> str:
        from rocmenv.escape import shown

        now = self.clock()
        runs = " ".join(f"{shown(n)}[{on}] {now - t0:.0f}s" for n, (on, t0) in self.running.items())
        done = ", ".join(f"{v} {k}" for k, v in sorted(self.done.items())) or "none done"
        return f"\x1b[7m running {len(self.running)}: {runs or '-'} | {done} \x1b[0m"[:400]

    def close(self) -> None:
        if self.board:
            self.ctx.stderr.write("\r\x1b[K")
            self.ctx.stderr.flush()


class _stop_on_signals:
    """SIGINT/SIGTERM set ``stop`` (the run then stops every test and returns 130)."""

    def __init__(self, stop: Any) -> None:
        self.stop = stop
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> None:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self.previous[sig] = signal.signal(sig, lambda _s, _f: self.stop.set())

    def __exit__(self, *exc: object) -> None:
        import signal

        for sig, old in self.previous.items():
            signal.signal(sig, old)


def run_slurm_exec(args: argparse.Namespace, ctx: Context) -> int:
    """On the allocated node: the test's container with exactly Slurm's GPUs."""
    from pathlib import Path

    from rocmenv.settings.resolve import Flags
    from rocmenv.suite.allocation import exec_on_node

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    return exec_on_node(
        ctx, flags=Flags(profile=args.profile, engine=args.engine, untrusted=args.untrusted),
        gres_conf=Path(args.gres_conf) if args.gres_conf else None, command=tuple(command),
        no_gpus=args.no_gpus, check=getattr(args, "access_check", None),
        on_exit=getattr(args, "on_exit", None),
    )  # fmt: skip


def run_slurm_warm(args: argparse.Namespace, ctx: Context) -> int:
    """On the allocated node, once per suite: each job step's ``slurm-exec`` in a child
    forked from this already-started rocmenv (:mod:`rocmenv.suite.warm`)."""
    from pathlib import Path

    from rocmenv.cli import build_parser
    from rocmenv.suite.allocation import warm_up_node
    from rocmenv.suite.warm import serve

    def announce(line: str) -> None:
        ctx.stdout.write(line + "\n")
        ctx.stdout.flush()

    parser = build_parser("suite")  # once: every child parses with it
    return serve(
        Path(args.socket_dir), lambda argv, peer: _warm_step(parser, argv, peer), announce,
        untrusted=args.untrusted, warm_up=lambda: warm_up_node(ctx, untrusted=args.untrusted),
    )  # fmt: skip


def _warm_step(parser: argparse.ArgumentParser, argv: list[str], peer: Any) -> int:
    """One step's ``suite slurm-exec`` in the runner's child (its streams, environment and
    working directory are the step's by now), as ``main`` would run it."""
    import contextlib
    import sys
    from pathlib import Path

    from rocmenv.cli import secret_env_values
    from rocmenv.cli._common import report_error, secrets_masked
    from rocmenv.errors import RocmenvError

    args = parser.parse_args(argv)
    if getattr(args, "func", None) is not run_slurm_exec:
        return 2
    args.access_check = peer.check_access
    args.on_exit = peer.exit  # the step ends at the test's exit; the removal follows here
    ctx = Context(debug=args.debug, config_path=Path(args.config) if args.config else None)
    secrets = secret_env_values(ctx.env)
    masked = secrets_masked(ctx.env, sys.stderr, secrets) if secrets else contextlib.nullcontext()
    with masked:
        try:
            return int(run_slurm_exec(args, ctx))
        except RocmenvError as err:
            return report_error(ctx, err, command="suite")
