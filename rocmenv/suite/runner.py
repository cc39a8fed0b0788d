"""``suite list/plan/run`` as library calls: load the suite, estimate, pick the GPU pool,
drive the packer with a backend, learn the times, build the report.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from rocmenv.context import Context
from rocmenv.engine import EngineName
from rocmenv.errors import RocmenvError, UsageError
from rocmenv.suite.history import History, history_path, read_history, record
from rocmenv.suite.model import (
    SlurmSettings,
    Suite,
    checkout_distrusted,
    load_suite,
    slurm_table,
    suite_names,
)
from rocmenv.suite.packer import Job, RunOptions, SuiteEvent, run_packed
from rocmenv.suite.plan import PlannedTest, estimates, partitions
from rocmenv.suite.report import SuiteReport

Backend = Literal["local", "slurm"]
BACKENDS: tuple[str, ...] = ("local", "slurm")


@dataclass(frozen=True, kw_only=True)
class Loaded:
    suite: Suite
    profile: str  # the profile's name (history key)
    history: History
    lockfile: Path
    root: Path


def load(ctx: Context, name: str) -> Loaded:
    from rocmenv.settings.project import find_config, load_config

    config = load_config(ctx)  # validates the whole file (and the profiles)
    path, table = find_config(ctx)
    where = str(path) if path else "configuration"
    suite = load_suite(
        table, name, root=config.root, where=where, slurm_raw=slurm_table(ctx, path, table)
    )
    profile_ = config.profile(suite.profile)
    if checkout_distrusted(ctx, path, untrusted=profile_.untrusted):
        suite = replace(suite, slurm=SlurmSettings())  # per-suite [suites.NAME.slurm] too
    profile = profile_.name
    history = read_history(history_path(config.lockfile))
    return Loaded(
        suite=suite, profile=profile, history=history, lockfile=config.lockfile, root=config.root
    )


def list_names(ctx: Context) -> list[str]:
    from rocmenv.settings.project import find_config, load_config

    load_config(ctx)
    _path, table = find_config(ctx)
    return suite_names(table)


def planned(
    loaded: Loaded, partition: tuple[int, int] | None = None, *, declared: bool = False
) -> list[PlannedTest]:
    """The tests with their estimates, longest first; ``declared``: ignore the history (every
    job of a CI matrix must plan from the same numbers)."""
    history = History(path=loaded.history.path) if declared else loaded.history
    tests = estimates(loaded.suite, history, loaded.profile)
    if partition is not None:
        index, count = partition
        return list(partitions(tests, count)[index].tests)
    return tests


def local_pool(ctx: Context, selection: str | None) -> tuple[int, ...]:
    """Host GPU indices that ``--gpus SEL`` (default all) names."""
    from rocmenv.settings.project import load_config
    from rocmenv.spec.gpu import discover, parse_gpus, select

    request = parse_gpus(selection or "all")
    if request.kind == "none":
        return ()
    config = load_config(ctx)
    inventory = discover(config.host.sysfs_root, config.host.dev_root)
    return select(request, inventory).indices


@dataclass(frozen=True, kw_only=True)
class SuiteRunRequest:
    name: str
    partition: tuple[int, int] | None = None
    gpus: str | None = None
    max_parallel: int | None = None
    fail_fast: bool = False
    backend: Backend = "local"
    engine: EngineName | None = None
    log_dir: Path | None = None
    learn: bool = True
    declared: bool = False  # plan from declared estimates only


def run_suite(
    ctx: Context,
    request: SuiteRunRequest,
    stop: threading.Event,
    on_event: Callable[[SuiteEvent], None],
) -> SuiteReport:
    loaded = load(ctx, request.name)
    tests = planned(loaded, request.partition, declared=request.declared)
    jobs = [Job(name=t.name, gpus=t.gpus, estimate=t.seconds) for t in tests]
    commands = {t.name: t.test.command for t in tests}
    if not jobs:
        raise UsageError(
            f"suite {loaded.suite.name!r} has no tests"
            + (
                f" in partition {request.partition[0]}/{request.partition[1]}"
                if request.partition
                else ""
            ),
            hint="check its tests/discover/labels (`rocmenv suite list NAME`)",
        )
    log_dir = request.log_dir or ctx.cwd / "rocmenv-suite-logs" / loaded.suite.name
    log_dir = log_dir if log_dir.is_absolute() else ctx.cwd / log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    if request.backend == "slurm":
        from rocmenv.suite.slurm import SlurmBackend, slurm_pool

        if request.gpus is not None:
            raise UsageError(
                "--gpus names this host's GPUs; with --backend slurm, Slurm allocates them",
                hint="drop --gpus (each test asks Slurm for its own count)",
            )

        pool = slurm_pool(jobs)
        backend = SlurmBackend(
            ctx=ctx, profile=loaded.suite.profile, engine=request.engine, commands=commands,
            log_dir=log_dir, settings=loaded.suite.slurm,
        )  # fmt: skip
        backend.check(jobs)
        launch = backend.launch
    else:
        from rocmenv.suite.local import LocalBackend, open_kill_engine, warm_launcher

        pool = local_pool(ctx, request.gpus)
        kill_engine = open_kill_engine(ctx, profile=loaded.suite.profile, engine=request.engine)
        warm_launcher(ctx)
        local = LocalBackend(
            ctx=ctx, profile=loaded.suite.profile, engine=request.engine, commands=commands,
            log_dir=log_dir, kill_engine=kill_engine,
        )  # fmt: skip
        launch = local.launch
    t0 = time.monotonic()
    results = run_packed(
        jobs, pool, launch, stop,
        RunOptions(max_parallel=request.max_parallel, fail_fast=request.fail_fast, on_event=on_event),
    )  # fmt: skip
    makespan = time.monotonic() - t0
    warnings: list[str] = []
    if request.learn:
        measured = [
            (r.name, r.runtime if r.runtime is not None else r.wall)
            for r in results
            if r.status == "passed"
        ]
        if measured:
            try:
                record(history_path(loaded.lockfile), loaded.profile, measured)
            except (RocmenvError, OSError) as err:  # the results stand; only learning failed
                warnings.append(f"could not record the test times: {err}")
    if request.backend == "slurm":
        pool = tuple(sorted({g for r in results for g in r.assigned}))
    return SuiteReport(
        suite=loaded.suite.name, backend=request.backend, results=tuple(results),
        makespan=makespan, pool=pool, interrupted=stop.is_set(), warnings=tuple(warnings),
    )  # fmt: skip
