"""docs/adopting.md's walk-throughs, exactly as written: every command block of each
walk-through runs with bash (from the repository root, rocmenv on PATH) on a fake 8-GPU host
with the local registry as the Docker Hub mirror. Then the Done-when of issue 17: selection,
timeouts, retries, partitions; disabled tests never run; the JUnit parses and validates."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakegpu import build_fake_host
from tests.support.junit_check import check_junit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adopting.md"


def walkthrough(name: str) -> str:
    """The command blocks marked ``<!-- walkthrough: NAME -->``, joined in order."""
    blocks = re.findall(rf"<!-- walkthrough: {name} -->\n```sh\n(.*?)```", DOC.read_text(), re.S)
    assert blocks, f"docs/adopting.md has no walk-through {name!r}"
    return "".join(blocks)


def run_walkthrough(name: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    host = build_fake_host(tmp_path / "host", char_devices=True)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROCMENV_", "GITHUB_"))}
    env |= host.env() | {
        "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
        "TMPDIR": str(scratch),
        "ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000",  # the machine's mirror, not the doc's
        "ROCMENV_PULL_FROM_MIRROR": "1",
        "ROCMENV_SHIMS_QUIET": "1",
    }
    script = "set -uo pipefail\nset -x\n" + walkthrough(name) + '\necho "WORKDIR=$PWD"\n'
    done = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    found = re.search(r"^WORKDIR=(.+)$", done.stdout, re.M)
    assert found, done.stdout[-3000:] + done.stderr[-3000:]
    workdir = Path(found.group(1))
    assert workdir.is_relative_to(scratch)  # the doc works on a copy, never in the repository
    return done, workdir


def _cases(path: Path, tmp: Path) -> dict[str, Any]:
    root, _ = check_junit(path.read_text(), tmp)
    return {c.get("name"): c for c in root.iter("testcase")}


def _children(case: Any) -> list[str]:
    return [child.tag for child in case if child.tag != "system-out"]


def test_the_miles_walkthrough_as_written(tmp_path: Path) -> None:
    done, work = run_walkthrough("miles", tmp_path)
    out = done.stdout + done.stderr
    toml = (work / "rocmenv.toml").read_text()
    assert 'extends = "rocm"' in toml and "privileged = true" in toml
    assert "[suites.stage-c-4-gpu-mi350]" in toml and "[suites.nightly-stage-c-8-gpu-mi350]" in toml
    assert "worst partition 6s (longest-first reference split: 7s)" in out
    # selection: disabled listed with the reason, never run; nightly and moe left out of the PR run
    assert out.count("DISABLED: FIXME: re-enable once this case passes on the MI350 runners.") == 2
    cases = _cases(work / "junit.xml", tmp_path)
    assert sorted(cases) == sorted(f"tests/e2e/{n}.py" for n in (
        "test_ckpt_convert", "test_fp8_gemm", "test_fused_kernel", "test_gsm8k_short",
        "test_lora_merge", "test_rollout_accuracy", "test_weight_sync"))  # fmt: skip
    assert _children(cases["tests/e2e/test_rollout_accuracy.py"]) == ["flakyFailure"]
    assert _children(cases["tests/e2e/test_fused_kernel.py"]) == ["failure"]
    timeout = cases["tests/e2e/test_weight_sync.py"].find("failure")
    assert timeout is not None and timeout.get("type") == "timeout"
    for name in ("test_fp8_gemm", "test_lora_merge"):
        skipped = cases[f"tests/e2e/{name}.py"].find("skipped")
        assert skipped is not None and skipped.get("message", "").startswith("disabled: FIXME")
    for name in ("test_gsm8k_short", "test_ckpt_convert"):
        assert _children(cases[f"tests/e2e/{name}.py"]) == []
    logs = work / "rocmenv-suite-logs" / "stage-c-4-gpu-mi350"
    assert not list(logs.glob("*fp8_gemm*")) and not list(logs.glob("*lora_merge*"))
    assert "must never run" not in out
    assert (logs / "tests__e2e__test_rollout_accuracy.py.attempt-2.log").exists()
    assert "TIMEOUT" in out and "124" in out
    # the nightly suite ran its 8-GPU test with --cadence nightly
    assert (
        "long context on 8 GPUs: ok"
        in (
            work
            / "rocmenv-suite-logs"
            / "nightly-stage-c-8-gpu-mi350"
            / "tests__e2e__test_long_context.py.log"
        ).read_text()
    )
    lock = json.loads((work / "rocmenv.lock").read_text())
    assert lock["profiles"]["ci"]["digest"].startswith("sha256:")


def test_the_sglang_walkthrough_as_written(tmp_path: Path) -> None:
    done, work = run_walkthrough("sglang", tmp_path)
    out = done.stdout + done.stderr
    toml = (work / "rocmenv.toml").read_text()
    for suite in (
        "stage-b-test-small-1-gpu-amd",
        "stage-b-2-gpu-small-amd-mi35x",
        "nightly-amd-8-gpu-mi35x",
    ):
        assert f"[suites.{suite}]" in toml
    assert 'stage-b-test-small-1-gpu"' not in toml  # no CUDA suite
    assert 'select = { stage = "stage-b", runner_config = "2-gpu-small-amd-mi35x" }' in toml
    assert "worst partition 6s (longest-first reference split: 7s)" in out
    one = _cases(work / "junit-1-gpu.xml", tmp_path)
    assert "test/registered/test_cuda_graph.py" not in one
    assert _children(one["test/registered/test_eval_mmlu.py"]) == ["flakyFailure"]
    assert _children(one["test/registered/test_triton_backend.py"]) == ["failure"]
    assert _children(one["test/registered/test_spec_decoding.py"]) == ["skipped"]
    for name in ("test_srt_endpoint", "test_radix_cache", "test_sampling_params"):
        assert _children(one[f"test/registered/{name}.py"]) == []
    two = _cases(work / "junit-2-gpu.xml", tmp_path)
    assert _children(two["test/registered/test_tp2_generate.py"]) == []
    hang = two["test/registered/test_pd_disaggregation.py"].find("failure")
    assert hang is not None and hang.get("type") == "timeout"
    assert "must never run" not in out
