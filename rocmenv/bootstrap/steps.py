"""``rocmenv bootstrap``: prepare a CI job container, from inside it.

Runs with the container's own Python, the standard library and rocmenv (plus ``packaging``
for reading the shim catalogue): no docker-py, no python-on-whales. Five steps, in order,
each reported in one line and in the JSON report:

1. ``gpu-wait``  — :mod:`rocmenv.bootstrap.gpuwait` (``--no-gpu-wait`` disables it)
2. ``reap``      — :mod:`rocmenv.bootstrap.procs` (``--no-reap``)
3. ``shims``     — install the launcher bundle and export ``PYTHONPATH`` (``--no-shims``)
4. ``overrides`` — :mod:`rocmenv.bootstrap.overrides` (only when overrides/patches are given)
5. ``environment`` — :mod:`rocmenv.bootstrap.envreport`, always

A failing step (exit 1) stops the steps after it, except the environment report, which always
runs: the report of a failed bootstrap is the diagnosis. Bad input (a ref git must not see,
a missing patch file) is refused before any step runs (exit 2).

**Exporting PYTHONPATH** (``--export``): ``github-env`` appends ``PYTHONPATH=<value>`` to the
file ``$GITHUB_ENV`` names (``NAME<<delimiter`` heredoc form when the value holds a newline);
``shell`` prints ``export PYTHONPATH=<quoted>`` on stdout, for ``eval "$(rocmenv bootstrap)"``;
``auto`` (default) is ``github-env`` when ``$GITHUB_ENV`` is set, else ``shell`` — or nothing
with ``--json`` (stdout is the JSON document; the value is in its ``exports``). The human
summary always goes to stderr, so stdout stays machine-readable.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from rocmenv.bootstrap.commands import Runner, run_command
from rocmenv.bootstrap.gpuwait import GpuWaitDeps, GpuWaitOptions
from rocmenv.bootstrap.refs import OverridePlan
from rocmenv.context import Context
from rocmenv.errors import ConfigError, RocmenvError, StepFailed
from rocmenv.hostfs import open_append, write_atomic

REPORT_VERSION = 1
ExportMethod = Literal["auto", "github-env", "shell", "none"]
StepStatus = Literal["ok", "failed", "skipped", "disabled"]
STEP_NAMES = ("gpu-wait", "reap", "shims", "overrides", "environment")


class StepJSON(TypedDict):
    name: str
    status: StepStatus
    summary: str
    duration_s: float
    details: dict[str, Any]


class BootstrapReportJSON(TypedDict):
    """The ``--report`` / ``--json`` document (``report_version`` 1)."""

    report_version: int
    ok: bool
    error: str | None
    started_at: str
    duration_s: float
    steps: list[StepJSON]
    exports: dict[str, str]
    export_method: str
    environment: Any  # bootstrap_envreport.EnvironmentJSON, or None


@dataclass(frozen=True, kw_only=True)
class BootstrapOptions:
    gpu_wait: bool = True
    gpu: GpuWaitOptions = field(default_factory=GpuWaitOptions)
    reap: bool = True
    reap_grace: float = 5.0
    proc_root: Path = Path("/proc")
    shims: bool = True
    launcher_dir: Path = Path("/opt/rocmenv/launcher")
    export: ExportMethod = "auto"
    json_output: bool = False
    overrides: OverridePlan = field(default_factory=lambda: OverridePlan(targets=()))
    python: str = field(default_factory=lambda: sys.executable)
    sysfs_root: Path = Path("/sys")


@dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    status: StepStatus
    summary: str
    duration_s: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> StepJSON:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "duration_s": round(self.duration_s, 3),
            "details": dict(self.details),
        }

    def line(self) -> str:
        from rocmenv.redact import redact

        return redact(f"{self.name:<11} {self.status:<8} {self.summary}")


@dataclass(frozen=True, kw_only=True)
class Export:
    method: Literal["github-env", "shell", "none"]
    values: Mapping[str, str]
    target: str | None = None  # the $GITHUB_ENV file
    shell_lines: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BootstrapResult:
    steps: tuple[Step, ...]
    export: Export
    environment: Any
    error: RocmenvError | None
    started_at: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.error is None

    def redacted_json(self) -> BootstrapReportJSON:
        """:meth:`to_json` as it may leave the process (report file, step summary, --json):
        every string redacted, whatever step put it there."""
        from rocmenv.redact import redact_json

        redacted: BootstrapReportJSON = redact_json(self.to_json())
        return redacted

    def to_json(self) -> BootstrapReportJSON:
        return {
            "report_version": REPORT_VERSION,
            "ok": self.ok,
            "error": str(self.error) if self.error is not None else None,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "steps": [s.to_json() for s in self.steps],
            "exports": dict(self.export.values),
            "export_method": self.export.method,
            "environment": self.environment,
        }


# ------------------------------------------------------------------ exporting


def github_env_entry(name: str, value: str) -> str:
    """One ``$GITHUB_ENV`` entry: ``NAME=value``, or the heredoc form for multi-line values."""
    if not name or not all(c.isalnum() or c == "_" for c in name) or name[0].isdigit():
        raise ConfigError(f"{name!r} is not an environment variable name")
    if "\n" not in value and "\r" not in value:
        return f"{name}={value}\n"
    delimiter = f"ghadelimiter_{uuid.uuid4()}"
    while delimiter in value:  # pragma: no cover - a uuid in the value
        delimiter = f"ghadelimiter_{uuid.uuid4()}"
    return f"{name}<<{delimiter}\n{value}\n{delimiter}\n"


def shell_export(name: str, value: str) -> str:
    return f"export {name}={shlex.quote(value)}"


def do_export(
    ctx: Context, values: Mapping[str, str], method: ExportMethod, *, json_output: bool
) -> Export:
    github_env = ctx.env.get("GITHUB_ENV", "")
    chosen: Literal["github-env", "shell", "none"]
    if method == "auto":
        chosen = "github-env" if github_env else ("none" if json_output else "shell")
    else:
        chosen = method
    if chosen == "github-env":
        if not github_env:
            raise ConfigError(
                "--export github-env: $GITHUB_ENV is not set",
                hint="run inside GitHub Actions, or use --export shell",
            )
        try:  # never through a link the checkout planted (rocmenv.hostfs)
            fd = open_append(Path(github_env), within=ctx.checkout)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                for name, value in values.items():
                    f.write(github_env_entry(name, value))
        except ValueError as err:
            raise ConfigError(f"$GITHUB_ENV ({github_env}): {err}") from None
        except OSError as err:
            raise ConfigError(
                f"cannot append to $GITHUB_ENV ({github_env}): {err}",
                hint="check the runner's temp directory is mounted into the job container",
            ) from None
        return Export(method=chosen, values=values, target=github_env)
    if chosen == "shell":
        return Export(
            method=chosen,
            values=values,
            shell_lines=tuple(shell_export(k, v) for k, v in values.items()),
        )
    return Export(method="none", values=values)


# ------------------------------------------------------------------ steps


def _install_shims(ctx: Context, options: BootstrapOptions) -> tuple[Step, dict[str, str]]:
    from rocmenv.shims.bundle import install_launcher, merge_pythonpath, prepare_launcher

    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rocmenv-bundle-") as tmp:
        try:
            bundle = prepare_launcher(ctx, cache_dir=Path(tmp))
        except ModuleNotFoundError as err:
            raise ConfigError(
                f"cannot read the shim catalogue: {err}",
                hint="install rocmenv with its dependency `packaging` next to it, e.g. "
                "pip install --no-deps --target DIR rocmenv packaging",
            ) from None
        target = install_launcher(ctx, options.launcher_dir, bundle=bundle)
    pythonpath = merge_pythonpath(str(target), ctx.env.get("PYTHONPATH"))
    names = [s.name for s in bundle.shims]
    step = Step(
        name="shims",
        status="ok",
        summary=f"launcher in {target} ({len(names)} shim{'s' if len(names) != 1 else ''}: "
        f"{', '.join(names) or 'none'})",
        duration_s=time.monotonic() - start,
        details={
            "launcher_dir": str(target),
            "digest": bundle.digest,
            "shims": names,
            "pythonpath": pythonpath,
        },
    )
    return step, {"PYTHONPATH": pythonpath}


@dataclass(frozen=True, kw_only=True)
class BootstrapDeps:
    """Seams for tests: the subprocess runner, the GPU wait's clock/sleep."""

    run: Runner = run_command
    gpu: GpuWaitDeps | None = None
    self_pid: int | None = None
    clock: Callable[[], float] = time.monotonic


def run_bootstrap(
    ctx: Context, options: BootstrapOptions, deps: BootstrapDeps | None = None
) -> BootstrapResult:
    """Run the steps; never raises for a failing step (see :attr:`BootstrapResult.error`)."""
    deps = deps or BootstrapDeps()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = deps.clock()
    steps: list[Step] = []
    error: RocmenvError | None = None
    exports: dict[str, str] = {}
    gfx_from_wait: tuple[str, ...] = ()

    def skipped(name: str) -> Step:
        return Step(name=name, status="skipped", summary="skipped: an earlier step failed")

    def failed(name: str, err: RocmenvError, start: float) -> Step:
        details = dict(err.details) if isinstance(err, StepFailed) else {}
        return Step(
            name=name,
            status="failed",
            summary=err.what.splitlines()[0],
            duration_s=deps.clock() - start,
            details=details,
        )

    # 1. GPU wait
    start = deps.clock()
    if not options.gpu_wait:
        steps.append(Step(name="gpu-wait", status="disabled", summary="--no-gpu-wait"))
    else:
        from rocmenv.bootstrap.gpuwait import wait_for_gpus

        gpu_deps = deps.gpu or GpuWaitDeps(run=deps.run)
        try:
            waited = wait_for_gpus(options.gpu, ctx.env, gpu_deps)
        except RocmenvError as err:
            error = err
            steps.append(failed("gpu-wait", err, start))
        else:
            gfx_from_wait = waited.gfx_targets
            steps.append(
                Step(
                    name="gpu-wait",
                    status="ok",
                    summary=waited.summary(),
                    duration_s=deps.clock() - start,
                    details=waited.to_json(),
                )
            )

    # 2. stale processes
    start = deps.clock()
    if error is not None:
        steps.append(skipped("reap"))
    elif not options.reap:
        steps.append(Step(name="reap", status="disabled", summary="--no-reap"))
    else:
        from rocmenv.bootstrap.procs import reap_stale

        try:
            reaped = reap_stale(
                proc_root=options.proc_root, self_pid=deps.self_pid, grace=options.reap_grace
            )
        except RocmenvError as err:
            error = err
            steps.append(failed("reap", err, start))
        else:
            steps.append(
                Step(
                    name="reap",
                    status="ok",
                    summary=reaped.summary(),
                    duration_s=deps.clock() - start,
                    details=reaped.to_json(),
                )
            )

    # 3. shims
    start = deps.clock()
    if error is not None:
        steps.append(skipped("shims"))
    elif not options.shims:
        steps.append(Step(name="shims", status="disabled", summary="--no-shims"))
    else:
        try:
            step, exports = _install_shims(ctx, options)
        except RocmenvError as err:
            error = err
            steps.append(failed("shims", err, start))
        else:
            steps.append(step)

    # 4. overrides
    start = deps.clock()
    if error is not None:
        steps.append(skipped("overrides"))
    elif options.overrides.empty:
        steps.append(Step(name="overrides", status="disabled", summary="no overrides requested"))
    else:
        from rocmenv.bootstrap.overrides import run_overrides

        plan = options.overrides
        if not plan.python:
            plan = dataclasses.replace(plan, python=options.python)
        try:
            overridden = run_overrides(plan, ctx.env, run=deps.run)
        except RocmenvError as err:
            error = err
            steps.append(failed("overrides", err, start))
        else:
            steps.append(
                Step(
                    name="overrides",
                    status="ok",
                    summary=overridden.summary(),
                    duration_s=deps.clock() - start,
                    details=overridden.to_json(),
                )
            )

    # 5. environment report (always)
    start = deps.clock()
    environment, env_step = _environment(ctx, options, deps, gfx_from_wait, exports)
    steps.append(
        Step(
            name="environment",
            status=env_step[0],
            summary=env_step[1],
            duration_s=deps.clock() - start,
            details=env_step[2],
        )
    )

    export = Export(method="none", values=exports)
    if exports and error is None:
        try:
            export = do_export(ctx, exports, options.export, json_output=options.json_output)
        except RocmenvError as err:
            error = err
    return BootstrapResult(
        steps=tuple(steps),
        export=export,
        environment=environment,
        error=error,
        started_at=started_at,
        duration_s=deps.clock() - t0,
    )


def _environment(
    ctx: Context,
    options: BootstrapOptions,
    deps: BootstrapDeps,
    gfx_from_wait: tuple[str, ...],
    exports: Mapping[str, str],
) -> tuple[Any, tuple[StepStatus, str, dict[str, Any]]]:
    import shutil

    from rocmenv.bootstrap.envreport import collect

    installed = options.launcher_dir / "probe.py"
    rocminfo = shutil.which("rocminfo", path=ctx.env.get("PATH"))
    probe_env = dict(ctx.env)  # the job's own PYTHONPATH: the probe finds its bundle itself
    try:
        with tempfile.TemporaryDirectory(prefix="rocmenv-probe-") as tmp:
            probe = installed if installed.is_file() and exports else None
            if probe is None:
                from rocmenv.shims.bundle import install_launcher, prepare_launcher

                bundle = prepare_launcher(ctx, cache_dir=Path(tmp) / "cache")
                probe = install_launcher(ctx, Path(tmp) / "launcher", bundle=bundle) / "probe.py"
            report = collect(
                python=options.python,
                probe_path=probe,
                env=probe_env,
                sysfs_root=options.sysfs_root,
                gfx_from_wait=gfx_from_wait,
                rocminfo=rocminfo,
                run=deps.run,
            )
    except (RocmenvError, ModuleNotFoundError, OSError) as err:
        text = err.what if isinstance(err, RocmenvError) else str(err)
        return None, ("failed", f"no environment report: {text}", {})
    details = {"probe": report.probe.to_json()} if report.probe is not None else {}
    status: StepStatus = "failed" if report.data["probe_error"] else "ok"
    return report.data, (status, report.summary(), details)


# ------------------------------------------------------------------ writing the report


def write_report(path: Path, result: BootstrapResult, *, within: Path | None) -> None:
    """Atomically write the JSON report (temp file in the same directory + rename), following
    no link inside ``within`` (the checkout: :mod:`rocmenv.hostfs`)."""
    path = Path(path)
    try:
        text = json.dumps(result.redacted_json(), indent=2, sort_keys=True) + "\n"
        write_atomic(path, text, within=within, durable=False, parents=True)
    except OSError as err:
        raise ConfigError(
            f"cannot write the bootstrap report {path}: {err}", hint="choose a writable --report"
        ) from None


def append_step_summary(ctx: Context, result: BootstrapResult) -> str | None:
    """Append the markdown section to ``$GITHUB_STEP_SUMMARY`` when it names a file."""
    target = ctx.env.get("GITHUB_STEP_SUMMARY", "")
    if not target:
        return None
    from rocmenv.bootstrap.envreport import markdown

    try:  # never through a link the checkout planted (rocmenv.hostfs)
        fd = open_append(Path(target), within=ctx.checkout)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(markdown(result.redacted_json()))
    except (OSError, ValueError):
        return None
    return target
