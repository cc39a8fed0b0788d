"""Bootstrap orchestration: exporting PYTHONPATH, step order and failure handling, the report,
the CLI's exit codes. GPU tools and /proc are faked here; tests/integration does it for real."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rocmenv.bootstrap.commands import CommandResult, run_command
from rocmenv.bootstrap.gpuwait import GpuWaitDeps, GpuWaitOptions
from rocmenv.bootstrap.steps import (
    BootstrapDeps,
    BootstrapOptions,
    do_export,
    github_env_entry,
    run_bootstrap,
    shell_export,
    write_report,
)
from rocmenv.cli import main
from rocmenv.context import Context
from rocmenv.errors import ConfigError

SMI_OK = "Device  Node  IDs\n0       2     0x74a1,   1  x\n1       3     0x74a1,   2  x\n"


def ctx_for(tmp_path: Path, **env: str) -> Context:
    base = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    return Context(env={**base, **env}, cwd=tmp_path, stdout=io.StringIO(), stderr=io.StringIO())


# ------------------------------------------------------------------ exports


def test_github_env_entry_is_a_plain_line_for_single_line_values() -> None:
    assert github_env_entry("PYTHONPATH", "/opt/a:/b c") == "PYTHONPATH=/opt/a:/b c\n"


def test_github_env_entry_uses_a_heredoc_delimiter_for_multiline_values() -> None:
    entry = github_env_entry("X", "line1\nline2")
    first, *middle, last = entry.rstrip("\n").split("\n")
    assert first.startswith("X<<ghadelimiter_")
    assert middle == ["line1", "line2"]
    assert last == first.split("<<", 1)[1]


def test_shell_export_quotes_for_eval() -> None:
    assert shell_export("PYTHONPATH", "/a b:$(rm -rf /)") == "export PYTHONPATH='/a b:$(rm -rf /)'"


def test_auto_export_appends_to_github_env_when_set(tmp_path: Path) -> None:
    env_file = tmp_path / "github_env"
    env_file.write_text("EARLIER=1\n")
    export = do_export(
        ctx_for(tmp_path, GITHUB_ENV=str(env_file)), {"PYTHONPATH": "/l:/x"}, "auto",
        json_output=False,
    )  # fmt: skip
    assert export.method == "github-env"
    assert env_file.read_text() == "EARLIER=1\nPYTHONPATH=/l:/x\n"
    assert export.shell_lines == ()


def test_github_env_is_not_appended_through_a_link_the_checkout_planted(tmp_path: Path) -> None:
    """Issue 22 item 1: ``$GITHUB_ENV`` named inside the checkout (a job container mounts the
    runner's work directory) is refused when it is a link, not written through."""
    victim = tmp_path.parent / f"{tmp_path.name}-victim"
    victim.write_text("precious\n")
    (tmp_path / "github_env").symlink_to(victim)
    ctx = ctx_for(tmp_path, GITHUB_ENV=str(tmp_path / "github_env"))
    with pytest.raises(ConfigError, match="symbolic link"):
        do_export(ctx, {"PYTHONPATH": "/l"}, "auto", json_output=False)
    assert victim.read_text() == "precious\n"
    summary = tmp_path / "summary.md"
    summary.symlink_to(victim)
    ctx = ctx_for(tmp_path, GITHUB_STEP_SUMMARY=str(summary))
    from rocmenv.bootstrap.steps import append_step_summary

    result = run_bootstrap(ctx, options(tmp_path, gpu_wait=False), BootstrapDeps())
    assert append_step_summary(ctx, result) is None
    assert victim.read_text() == "precious\n"
    (tmp_path / "reports").symlink_to(tmp_path.parent)
    with pytest.raises(ConfigError, match="symbolic link"):
        write_report(tmp_path / "reports" / "r.json", result, within=tmp_path)
    assert not (tmp_path.parent / "r.json").exists()


def test_auto_export_prints_shell_lines_without_github_env_and_nothing_with_json(
    tmp_path: Path,
) -> None:
    shell = do_export(ctx_for(tmp_path), {"PYTHONPATH": "/l"}, "auto", json_output=False)
    assert shell.shell_lines == ("export PYTHONPATH=/l",)
    assert (
        do_export(ctx_for(tmp_path), {"PYTHONPATH": "/l"}, "auto", json_output=True).method
        == "none"
    )


# ------------------------------------------------------------------ orchestration


class FakeSmi:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0
        self.now = 0.0

    def run(self, argv: Sequence[str], *, timeout: float, env: Any = None) -> CommandResult:
        self.calls += 1
        bad = self.calls <= self.failures
        return CommandResult(argv=tuple(argv), cwd=None, returncode=1 if bad else 0,
                             stdout="" if bad else SMI_OK, stderr="not ready" if bad else "",
                             duration_s=0.0)  # fmt: skip

    def deps(self) -> BootstrapDeps:
        def sleep(s: float) -> None:
            self.now += s

        gpu = GpuWaitDeps(run=self.run, sleep=sleep, clock=lambda: self.now,
                          which=lambda n, p: "/usr/bin/rocm-smi" if n == "rocm-smi" else None)  # fmt: skip
        return BootstrapDeps(run=run_command, gpu=gpu, self_pid=os.getpid())


def options(tmp_path: Path, **kw: Any) -> BootstrapOptions:
    (tmp_path / "proc").mkdir(exist_ok=True)  # never the host's /proc in unit tests
    base: dict[str, Any] = {
        "proc_root": tmp_path / "proc",
        "launcher_dir": tmp_path / "launcher",
        "sysfs_root": tmp_path / "sys",
        "gpu": GpuWaitOptions(timeout=10),
    }
    base.update(kw)
    return BootstrapOptions(**base)


def test_all_steps_run_in_order_and_the_launcher_is_exported_first(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, PYTHONPATH="/image/site")
    result = run_bootstrap(ctx, options(tmp_path), FakeSmi(failures=2).deps())
    assert result.ok, result.error
    assert [(s.name, s.status) for s in result.steps] == [
        ("gpu-wait", "ok"), ("reap", "ok"), ("shims", "ok"),
        ("overrides", "disabled"), ("environment", "ok"),
    ]  # fmt: skip
    assert "2 GPUs after 3 attempts" in result.steps[0].summary
    assert result.export.values == {"PYTHONPATH": f"{tmp_path / 'launcher'}:/image/site"}
    assert (tmp_path / "launcher" / "sitecustomize.py").is_file()
    env = result.environment
    assert env["python"]["version"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}")
    assert {s["name"] for s in env["shims"]} == {"aiter-shuffle-scale"}


def test_a_failed_gpu_wait_skips_the_steps_after_it_but_still_reports(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    result = run_bootstrap(
        ctx, options(tmp_path, gpu=GpuWaitOptions(timeout=3)), FakeSmi(failures=99).deps()
    )
    assert not result.ok and result.error is not None and result.error.exit_code == 1
    assert [s.status for s in result.steps] == ["failed", "skipped", "skipped", "skipped", "ok"]
    assert result.steps[0].details["attempts"]
    assert "not ready" in str(result.error)
    assert result.export.method == "none"
    assert not (tmp_path / "launcher").exists()


def test_a_failed_override_exports_nothing_but_the_report_keeps_the_launcher_path(
    tmp_path: Path,
) -> None:
    from rocmenv.bootstrap.refs import make_plan

    plan = make_plan(refs={"sglang": ("feature", "flag")}, patches=[],
                     paths={"sglang": str(tmp_path / "no-checkout")}, subdirs={}, cwd=tmp_path)  # fmt: skip
    env_file = tmp_path / "github_env"
    env_file.touch()
    ctx = ctx_for(tmp_path, GITHUB_ENV=str(env_file))
    result = run_bootstrap(ctx, options(tmp_path, gpu_wait=False, overrides=plan), BootstrapDeps())
    assert [s.status for s in result.steps] == ["disabled", "ok", "ok", "failed", "ok"]
    assert result.error is not None and result.error.exit_code == 1
    assert result.steps[3].summary == result.error.what.splitlines()[0]
    assert result.export.method == "none" and env_file.read_text() == ""
    assert result.export.values == {"PYTHONPATH": str(tmp_path / "launcher")}


def test_an_export_that_fails_is_the_bootstrap_error_after_every_step_ran(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)  # no $GITHUB_ENV
    result = run_bootstrap(
        ctx, options(tmp_path, gpu_wait=False, export="github-env"), BootstrapDeps()
    )
    assert [s.status for s in result.steps] == ["disabled", "ok", "ok", "disabled", "ok"]
    assert result.error is not None and "$GITHUB_ENV is not set" in result.error.what
    assert result.export.method == "none"
    assert result.export.values == {"PYTHONPATH": str(tmp_path / "launcher")}


def test_the_report_file_is_json_with_every_step(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    result = run_bootstrap(ctx, options(tmp_path, gpu_wait=False, reap=False), BootstrapDeps())
    write_report(tmp_path / "out" / "report.json", result, within=tmp_path)
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["report_version"] == 1 and data["ok"] is True
    assert [s["name"] for s in data["steps"]] == [
        "gpu-wait", "reap", "shims", "overrides", "environment"]  # fmt: skip
    assert data["steps"][0]["status"] == "disabled"
    assert set(data["environment"]["packages"]) == {
        "torch", "sglang", "aiter", "transformer-engine", "megatron-core"}  # fmt: skip
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["report.json"]


def test_no_shims_still_reports_the_shim_verdicts(tmp_path: Path) -> None:
    result = run_bootstrap(
        ctx_for(tmp_path), options(tmp_path, gpu_wait=False, shims=False), BootstrapDeps()
    )
    assert result.ok
    assert result.export.values == {}
    assert result.environment["shims"][0]["name"] == "aiter-shuffle-scale"
    assert not (tmp_path / "launcher").exists()


def test_gfx_targets_come_from_the_kfd_topology_without_rocminfo(tmp_path: Path) -> None:
    nodes = tmp_path / "sys" / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for n, (simd, gfx) in enumerate([(0, 0), (304, 90402), (304, 90402)]):
        (nodes / str(n)).mkdir(parents=True)
        (nodes / str(n) / "properties").write_text(f"simd_count {simd}\ngfx_target_version {gfx}\n")
    ctx = ctx_for(tmp_path, PATH=str(tmp_path / "empty"))
    result = run_bootstrap(ctx, options(tmp_path, gpu_wait=False), BootstrapDeps())
    assert result.environment["gfx_targets"] == ["gfx942"]
    assert result.environment["gfx_source"] == "kfd-topology"


def test_step_summary_gets_a_markdown_table(tmp_path: Path) -> None:
    from rocmenv.bootstrap.steps import append_step_summary

    summary = tmp_path / "summary.md"
    ctx = ctx_for(tmp_path, GITHUB_STEP_SUMMARY=str(summary))
    result = run_bootstrap(ctx, options(tmp_path, gpu_wait=False), BootstrapDeps())
    assert append_step_summary(ctx, result) == str(summary)
    text = summary.read_text()
    assert text.startswith("### rocmenv bootstrap\n")
    assert "| shims | ok |" in text and "| shim aiter-shuffle-scale |" in text


# ------------------------------------------------------------------ CLI


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "args",
    [
        ["--sglang-pr=--upload-pack=/bin/evil"],
        ["--sglang-pr", "main branch"],
        ["--megatron-pr", "a..b"],
        ["--sglang-pr", "#0"],
        ["--patch", "sglang=/nonexistent.patch"],
        ["--gpu-tools", ","],
        ["--expect-gpus", "0"],
        ["--remote=-x", "--sglang-pr", "#1"],
        ["--gpu-timeout", "-1"],
        ["--gpu-timeout", "nan"],
        ["--gpu-timeout", "inf"],
        ["--reap-grace", "1e400"],
    ],
)
def test_bad_input_is_a_usage_error_before_anything_runs(
    args: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    launcher = tmp_path / "launcher"
    code, out, err = cli(["bootstrap", "--launcher-dir", str(launcher), *args], capsys)
    assert code == 2, err
    assert out == ""
    assert not launcher.exists()


def test_cli_prints_export_lines_on_stdout_and_steps_on_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_ENV", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("PYTHONPATH", "/img")
    (tmp_path / "proc").mkdir()
    code, out, err = cli(
        ["bootstrap", "--no-gpu-wait", "--proc-root", str(tmp_path / "proc"),
         "--launcher-dir", str(tmp_path / "l"), "--report", str(tmp_path / "r.json")],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert out == f"export PYTHONPATH={tmp_path / 'l'}:/img\n"
    assert "rocmenv bootstrap: shims       ok" in err
    assert json.loads((tmp_path / "r.json").read_text())["ok"] is True


def test_cli_json_output_is_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_ENV", raising=False)
    monkeypatch.setenv("ROCMENV_PR_BODY", "nothing to see")
    (tmp_path / "proc").mkdir()
    code, out, _err = cli(
        ["bootstrap", "--json", "--no-gpu-wait", "--proc-root", str(tmp_path / "proc"),
         "--launcher-dir", str(tmp_path / "l")],
        capsys,
    )  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["export_method"] == "none" and data["exports"]["PYTHONPATH"].startswith(
        str(tmp_path / "l")
    )


def test_cli_gpu_failure_exits_1_with_the_last_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "rocm-smi"
    smi.write_text("#!/bin/sh\necho 'ERROR: Driver not initialized (amdgpu not found)'\nexit 2\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("GITHUB_ENV", raising=False)
    code, out, err = cli(
        ["bootstrap", "--gpu-timeout", "1", "--launcher-dir", str(tmp_path / "l"),
         "--report", str(tmp_path / "r.json")],
        capsys,
    )  # fmt: skip
    assert code == 1
    assert out == ""
    assert "amdgpu not found" in err and "rocmenv bootstrap: error:" in err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["ok"] is False and report["steps"][0]["status"] == "failed"


def test_bootstrap_import_pulls_no_third_party_modules() -> None:
    import subprocess

    code = (
        "import sys, rocmenv.cli.bootstrap, rocmenv.bootstrap.steps, rocmenv.bootstrap.gpuwait, "
        "rocmenv.bootstrap.procs, rocmenv.bootstrap.overrides, rocmenv.bootstrap.envreport;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'docker', 'python_on_whales', 'pydantic', 'requests', 'packaging'});"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
