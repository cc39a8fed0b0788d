"""``suite list/plan/run`` as library calls: load the suite, select its tests (cadence,
labels, disabled), estimate, pick the GPU pool, drive the packer with a backend, learn the
times, build the report (disabled tests in it as skipped, with their reasons).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from rocmenv.context import Context
from rocmenv.errors import RocmenvError, UsageError
from rocmenv.settings.project import load_project
from rocmenv.settings.resolve import Flags, Settings, settings_for
from rocmenv.suite.drive import Launch, RunOptions, SuiteEvent, TestResult, run_packed
from rocmenv.suite.history import History, history_path, read_history, record
from rocmenv.suite.labels import parse_label_policy
from rocmenv.suite.model import Suite, load_suite, suite_profile
from rocmenv.suite.packer import Job
from rocmenv.suite.plan import PlannedTest, estimates, partitions
from rocmenv.suite.report import SuiteReport
from rocmenv.suite.select import Selected, Selection, nothing_selected, select

Backend = Literal["local", "slurm"]
BACKENDS: tuple[str, ...] = ("local", "slurm")


@dataclass(frozen=True, kw_only=True)
class Loaded:
    suite: Suite
    settings: Settings  # resolved for the suite's profile
    history: History

    @property
    def profile(self) -> str:
        """The profile's name (the history's key)."""
        return self.settings.profile.name


def load(ctx: Context, name: str, flags: Flags | None = None) -> Loaded:
    """``[suites.NAME]`` with the settings of its profile (``flags`` from the command line;
    ``flags.profile``, from ``--profile``, runs every test with that profile instead)."""
    project = load_project(ctx)
    profile = suite_profile(project.suites, name, where=project.where)
    flags = flags or Flags()
    profile = flags.profile or profile
    settings = settings_for(ctx, replace(flags, profile=profile), project=project)
    suite = load_suite(
        project.suites, name, root=project.root, where=project.where,
        slurm=settings.slurm_for(name), labels=parse_label_policy(project.labels, project.where),
    )  # fmt: skip
    history = read_history(history_path(settings.lockfile))
    return Loaded(suite=suite, settings=settings, history=history)


def list_names(ctx: Context) -> list[str]:
    settings_for(ctx)  # validates the whole file (and the default profile)
    return list(load_project(ctx).suites)


def planned(
    loaded: Loaded,
    partition: tuple[int, int] | None = None,
    *,
    declared: bool = False,
    selection: Selection | None = None,
) -> list[PlannedTest]:
    """The selected tests to run (disabled ones left out) with their estimates, longest
    first; ``declared``: ignore the history (every job of a CI matrix must plan from the same
    numbers)."""
    history = History(path=loaded.history.path) if declared else loaded.history
    chosen = select(loaded.suite, selection or Selection())
    tests = estimates(loaded.suite, history, loaded.profile, chosen.run)
    if partition is not None:
        index, count = partition
        return list(partitions(tests, count)[index].tests)
    return tests


def local_pool(settings: Settings, selection: str | None) -> tuple[int, ...]:
    """Host GPU indices that ``--gpus SEL`` (default all: this runner's pool) names: only
    GPUs whose device nodes exist here (:mod:`rocmenv.container.pool`)."""
    from rocmenv.container.gpu import parse_gpus, select
    from rocmenv.container.pool import host_inventory

    request = parse_gpus(selection or "all")
    if request.kind == "none":
        return ()
    return select(request, host_inventory(settings.host)).indices


@dataclass(frozen=True, kw_only=True)
class SuiteRunRequest:
    name: str
    partition: tuple[int, int] | None = None
    gpus: str | None = None
    max_parallel: int | None = None
    fail_fast: bool = False
    backend: Backend = "local"
    flags: Flags = field(default_factory=Flags)  # engine, untrusted
    log_dir: Path | None = None
    output: Path | None = None  # --output: each test's output directory goes to DIR/TEST
    learn: bool = True
    declared: bool = False  # plan from declared estimates only
    selection: Selection = field(default_factory=Selection)


def run_suite(
    ctx: Context,
    request: SuiteRunRequest,
    stop: threading.Event,
    on_event: Callable[[SuiteEvent], None],
) -> SuiteReport:
    loaded = load(ctx, request.name, request.flags)
    chosen = select(loaded.suite, request.selection)
    tests = planned(
        loaded, request.partition, declared=request.declared, selection=request.selection
    )
    suite = loaded.suite
    jobs = [
        Job(name=t.name, gpus=t.gpus, estimate=t.seconds, timeout=suite.timeout(t.test),
            policy=t.test.policy)
        for t in tests
    ]  # fmt: skip
    commands = {t.name: t.test.command for t in tests}
    if not jobs:  # empty is green: nothing to start, no engine or GPU asked
        return SuiteReport(
            suite=suite.name, backend=request.backend, makespan=0.0, pool=(),
            results=tuple(disabled_results(loaded, chosen, request.partition)),
            notices=(*chosen.notices, nothing_selected(suite, chosen, request.partition)),
        )  # fmt: skip
    log_dir = make_log_dir(ctx, request.log_dir, loaded)
    if request.output is not None:
        from rocmenv.run.output import check_destination

        check_destination(request.output, ctx.checkout)
    options = RunOptions(
        max_parallel=request.max_parallel, fail_fast=request.fail_fast, on_event=on_event
    )
    t0 = time.monotonic()  # a Slurm allocation's wait counts, as each job's wait does
    with backend_for(ctx, request, loaded, jobs, commands, log_dir, stop) as (pool, launch):
        results = run_packed(jobs, pool, launch, stop, options) if jobs else []
        makespan = time.monotonic() - t0
    results += disabled_results(loaded, chosen, request.partition)
    warnings: list[str] = []
    if request.learn and loaded.settings.untrusted:
        warnings.append("untrusted mode: the measured test times are not recorded (an "
                        "untrusted run teaches the trusted side nothing)")  # fmt: skip
    elif request.learn:
        measured = [
            (r.name, r.runtime if r.runtime is not None else r.wall)
            for r in results
            if r.status == "passed"
        ]
        if measured:
            try:
                record(history_path(loaded.settings.lockfile), loaded.profile, measured,
                       within=ctx.checkout)  # fmt: skip
            except (RocmenvError, OSError) as err:  # the results stand; only learning failed
                warnings.append(f"could not record the test times: {err}")
    if request.backend == "slurm":
        pool = tuple(sorted({g for r in results for g in r.assigned}))
    return SuiteReport(
        suite=loaded.suite.name, backend=request.backend, results=tuple(results),
        makespan=makespan, pool=pool, interrupted=stop.is_set(), warnings=tuple(warnings),
        log_dir=str(log_dir), notices=chosen.notices,
    )  # fmt: skip


@contextlib.contextmanager
def backend_for(
    ctx: Context,
    request: SuiteRunRequest,
    loaded: Loaded,
    jobs: list[Job],
    commands: dict[str, tuple[str, ...]],
    log_dir: Path,
    stop: threading.Event,
) -> Iterator[tuple[tuple[int, ...], Launch]]:
    """The GPU pool the packer hands out and how a test is launched: the host's GPUs
    (local); slots of one Slurm allocation held for the suite (``packing = "rocmenv"``); or a
    virtual pool with every test its own Slurm job (``packing = "slurm"``)."""
    if request.backend != "slurm":
        from rocmenv.engine.select import open_engine
        from rocmenv.suite.local import LocalBackend, warm_launcher

        pool = local_pool(loaded.settings, request.gpus)
        kill_engine = open_engine(ctx, loaded.settings.engine)
        warm_launcher(ctx)
        local = LocalBackend(
            ctx=ctx, profile=loaded.profile, flags=request.flags, commands=commands,
            log_dir=log_dir, kill_engine=kill_engine, output=request.output,
        )  # fmt: skip
        yield pool, local.launch
        return
    from rocmenv.suite.slurm import SlurmBackend, slurm_pool
    from rocmenv.suite.steps import StepBackend, cluster_nodes, hold

    if request.gpus is not None:
        raise UsageError(
            "--gpus names this host's GPUs; with --backend slurm, Slurm allocates them",
            hint="drop --gpus (each test asks Slurm for its own count)",
        )
    backend = SlurmBackend(
        ctx=ctx, profile=loaded.profile,
        flags=replace(request.flags, untrusted=loaded.settings.untrusted), commands=commands,
        log_dir=log_dir, settings=loaded.suite.slurm, output=request.output,
    )  # fmt: skip
    if loaded.suite.slurm.packing == "slurm" or not jobs:
        backend.check(jobs)
        yield slurm_pool(jobs), backend.launch
        return
    nodes = cluster_nodes(ctx.env, loaded.suite.slurm)  # one sinfo for the check and the size
    backend.check(jobs, max(n.gpus for n in nodes) if nodes else None)
    with hold(backend, jobs, stop, request.max_parallel, nodes) as held:
        if held is None:  # interrupted while the allocation was pending: nothing starts
            yield slurm_pool(jobs), backend.launch
            return
        yield tuple(range(held.gpus)), StepBackend(jobs=backend, held=held).launch


def disabled_results(
    loaded: Loaded, chosen: Selected, partition: tuple[int, int] | None
) -> list[TestResult]:
    """Disabled tests as skipped results with their reasons (in partition 0 only, so a
    matrix reports each once)."""
    if partition is not None and partition[0] != 0:
        return []
    return [
        TestResult(
            name=t.name,
            gpus=t.gpus,
            status="skipped",
            disabled=t.disabled,
            message=f"disabled: {t.disabled}",
            estimate=loaded.suite.declared(t),
        )
        for t in chosen.disabled
    ]


def default_log_dir(ctx: Context, suite: str, *, untrusted: bool) -> Path:
    """``rocmenv-suite-logs/NAME`` in the working directory; in untrusted mode outside the
    checkout (the fork's files and containers could shape it): ``$RUNNER_TEMP``, else the
    XDG state directory."""
    if not untrusted:
        return ctx.cwd / "rocmenv-suite-logs" / suite
    runner_temp = ctx.env.get("RUNNER_TEMP", "")
    if runner_temp.startswith("/"):
        return Path(runner_temp) / "rocmenv-suite-logs" / suite
    state = ctx.env.get("XDG_STATE_HOME", "")
    if not state.startswith("/"):
        state = str(Path(ctx.env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state) / "rocmenv" / "suite-logs" / suite


def make_log_dir(ctx: Context, given: Path | None, loaded: Loaded) -> Path:
    """The per-test log directory (``--log-dir``, else :func:`default_log_dir`), made without
    following a link the checkout planted (:mod:`rocmenv.hostfs`)."""
    import os

    from rocmenv.hostfs import LinkRefused, open_dir

    log_dir = given or default_log_dir(ctx, loaded.suite.name, untrusted=loaded.settings.untrusted)
    log_dir = log_dir if log_dir.is_absolute() else ctx.cwd / log_dir
    try:
        os.close(open_dir(log_dir, within=ctx.checkout, create=True))
    except LinkRefused as err:
        raise UsageError(f"the log directory: {err}",
                         hint="remove the link, or name another --log-dir") from None  # fmt: skip
    except OSError as err:
        raise UsageError(f"cannot make the log directory {log_dir}: {err.strerror}",
                         hint="name a writable --log-dir") from None  # fmt: skip
    return log_dir
