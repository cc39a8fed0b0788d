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
runs: the report of a failed bootstrap is the diagnosis (:mod:`rocmenv.bootstrap.progress`). Bad input (a ref git must not see,
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
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from rocmenv.bootstrap.commands import Runner, run_command
from rocmenv.bootstrap.gpuwait import GpuWaitDeps, GpuWaitOptions, GpuWaitResult, wait_for_gpus
from rocmenv.bootstrap.progress import Progress, Step, StepJSON, StepStatus, off
from rocmenv.bootstrap.refs import OverridePlan
from rocmenv.context import Context
from rocmenv.errors import ConfigError, RocmenvError
from rocmenv.hostfs import open_append, write_atomic

if TYPE_CHECKING:
    from rocmenv.bootstrap.overrides import OverrideResult
    from rocmenv.bootstrap.procs import ReapResult

REPORT_VERSION = 1
ExportMethod = Literal["auto", "github-env", "shell", "none"]
STEP_NAMES = ("gpu-wait", "reap", "shims", "overrides", "environment")


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
    progress = Progress(clock=deps.clock)
    waited = progress.run(
        "gpu-wait", off(options.gpu_wait, "--no-gpu-wait"), lambda: _wait(ctx, options, deps)
    )
    progress.run("reap", off(options.reap, "--no-reap"), lambda: _reap(options, deps))
    shims = progress.run(
        "shims", off(options.shims, "--no-shims"), lambda: _install_shims(ctx, options)
    )
    progress.run(
        "overrides",
        off(not options.overrides.empty, "no overrides requested"),
        lambda: _overrides(ctx, options, deps),
    )
    exports = dict(shims.exports) if shims is not None else {}
    gfx_from_wait = waited.gfx_targets if waited is not None else ()
    environment = progress.always(
        "environment", lambda: _environment(ctx, options, deps, gfx_from_wait, exports)
    )
    export = _export(progress, ctx, options, exports)
    return BootstrapResult(
        steps=tuple(progress.steps),
        export=export,
        environment=environment,
        error=progress.error,
        started_at=started_at,
        duration_s=deps.clock() - t0,
    )


def _wait(ctx: Context, options: BootstrapOptions, deps: BootstrapDeps) -> GpuWaitResult:
    return wait_for_gpus(options.gpu, ctx.env, deps.gpu or GpuWaitDeps(run=deps.run))


def _reap(options: BootstrapOptions, deps: BootstrapDeps) -> ReapResult:
    from rocmenv.bootstrap.procs import reap_stale

    return reap_stale(proc_root=options.proc_root, self_pid=deps.self_pid, grace=options.reap_grace)


@dataclass(frozen=True, kw_only=True)
class _ShimsInstalled:
    target: Path
    digest: str
    names: tuple[str, ...]
    pythonpath: str

    @property
    def exports(self) -> dict[str, str]:
        return {"PYTHONPATH": self.pythonpath}

    def summary(self) -> str:
        names = self.names
        return (
            f"launcher in {self.target} ({len(names)} shim{'s' if len(names) != 1 else ''}: "
            f"{', '.join(names) or 'none'})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "launcher_dir": str(self.target),
            "digest": self.digest,
            "shims": list(self.names),
            "pythonpath": self.pythonpath,
        }


def _install_shims(ctx: Context, options: BootstrapOptions) -> _ShimsInstalled:
    from rocmenv.shims.bundle import install_launcher, merge_pythonpath, prepare_launcher

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
    return _ShimsInstalled(
        target=target,
        digest=bundle.digest,
        names=tuple(s.name for s in bundle.shims),
        pythonpath=merge_pythonpath(str(target), ctx.env.get("PYTHONPATH")),
    )


def _overrides(ctx: Context, options: BootstrapOptions, deps: BootstrapDeps) -> OverrideResult:
    from rocmenv.bootstrap.overrides import run_overrides

    plan = options.overrides
    if not plan.python:
        plan = dataclasses.replace(plan, python=options.python)
    return run_overrides(plan, ctx.env, run=deps.run)


def _export(
    progress: Progress, ctx: Context, options: BootstrapOptions, exports: Mapping[str, str]
) -> Export:
    """Export what the steps made (PYTHONPATH) unless one failed; failing to export is the
    bootstrap's error."""
    if exports and progress.error is None:
        try:
            return do_export(ctx, exports, options.export, json_output=options.json_output)
        except RocmenvError as err:
            progress.error = err
    return Export(method="none", values=exports)


def _environment(
    ctx: Context,
    options: BootstrapOptions,
    deps: BootstrapDeps,
    gfx_from_wait: tuple[str, ...],
    exports: Mapping[str, str],
) -> tuple[Any, StepStatus, str, dict[str, Any]]:
    """The environment report: its data (None when it could not be made), status, summary
    and details."""
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
        return None, "failed", f"no environment report: {text}", {}
    details = {"probe": report.probe.to_json()} if report.probe is not None else {}
    status: StepStatus = "failed" if report.data["probe_error"] else "ok"
    return report.data, status, report.summary(), details


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
