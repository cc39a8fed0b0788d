"""GPU wait: what each tool's output counts as, and the bounded backoff loop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from rocmenv.bootstrap.commands import CommandResult
from rocmenv.bootstrap.gpuwait import (
    GpuWaitDeps,
    GpuWaitOptions,
    parse_amd_smi,
    parse_rocm_smi,
    parse_rocminfo,
    wait_for_gpus,
)
from rocmenv.errors import GpuNotReady

ROCM_SMI_8 = (
    """
============================================ ROCm System Management Interface ============================================
====================================================== Concise Info ======================================================
Device  Node  IDs              Temp        Power     Partitions          SCLK    MCLK    Fan  Perf  PwrCap  VRAM%  GPU%
              (DID,     GUID)  (Junction)  (Socket)  (Mem, Compute, ID)
==========================================================================================================================
"""
    + "".join(
        f"{i}       {i + 2}     0x74a1,   {28851 + i}  35.0°C      131.0W    NPS1, SPX, 0        "
        "131Mhz  900Mhz  0%   auto  750.0W  0%     0%\n"
        for i in range(8)
    )
    + """==========================================================================================================================
================================================== End of ROCm SMI Log ===================================================
"""
)

ROCM_SMI_NONE = """
============================================ ROCm System Management Interface ============================================
WARNING: No AMD GPUs specified
====================================================== Concise Info ======================================================
Device  Node  IDs              Temp        Power     Partitions          SCLK    MCLK    Fan  Perf  PwrCap  VRAM%  GPU%
==========================================================================================================================
==========================================================================================================================
================================================== End of ROCm SMI Log ===================================================
"""

ROCM_SMI_SHOWID = """
============================ ROCm System Management Interface ============================
=========================================== ID ===========================================
GPU[0]		: Device Name: 		AMD Instinct MI300X
GPU[0]		: Device ID: 		0x74a1
GPU[1]		: Device Name: 		AMD Instinct MI300X
GPU[1]		: Device ID: 		0x74a1
==========================================================================================
"""

AMD_SMI_LIST = """GPU: 0
    BDF: 0000:05:00.0
    UUID: 7eff74a1-0000-1000-80a4-b1d3e47cd0b8
    KFD_ID: 45412
    NODE_ID: 2

GPU: 1
    BDF: 0000:26:00.0
    UUID: 1cff74a1-0000-1000-8008-bbc0e3ba5e88
    KFD_ID: 51796
    NODE_ID: 3
"""

ROCMINFO = """ROCk module version 6.8.5 is loaded
=====================
HSA System Attributes
=====================
Runtime Version:         1.14
*******
Agent 1
*******
  Name:                    AMD EPYC 9654 96-Core Processor
  Uuid:                    CPU-XX
  Marketing Name:          AMD EPYC 9654 96-Core Processor
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx942
  Uuid:                    GPU-6a5e2c9e1f0f8a3b
  Marketing Name:          AMD Instinct MI300X
  Device Type:             GPU
  ISA Info:
    ISA 1
      Name:                    amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-
*******
Agent 3
*******
  Name:                    gfx942
  Marketing Name:          AMD Instinct MI300X
  Device Type:             GPU
*** Done ***
"""


def test_rocm_smi_concise_table_counts_device_rows() -> None:
    assert parse_rocm_smi(ROCM_SMI_8).gpus == 8


def test_rocm_smi_without_gpus_counts_zero() -> None:
    assert parse_rocm_smi(ROCM_SMI_NONE).gpus == 0


def test_rocm_smi_gpu_prefix_views_count_distinct_indices() -> None:
    assert parse_rocm_smi(ROCM_SMI_SHOWID).gpus == 2


def test_rocm_smi_numbers_outside_the_table_do_not_count() -> None:
    assert parse_rocm_smi("1 2 3 things\n0   1   x\n").gpus == 0


def test_amd_smi_list_counts_gpu_lines() -> None:
    assert parse_amd_smi(AMD_SMI_LIST).gpus == 2


def test_rocminfo_counts_gpu_agents_and_reads_their_gfx_target() -> None:
    parsed = parse_rocminfo(ROCMINFO)
    assert parsed.gpus == 2
    assert parsed.gfx_targets == ("gfx942",)


def test_rocminfo_with_cpu_agent_only_counts_zero() -> None:
    assert parse_rocminfo(ROCMINFO.split("Agent 2")[0]).gpus == 0


class FakeTool:
    """A GPU tool that fails `failures` times, then prints `ok_output`; a fake clock."""

    def __init__(self, failures: int, ok_output: str = ROCM_SMI_8) -> None:
        self.failures = failures
        self.ok_output = ok_output
        self.calls: list[tuple[tuple[str, ...], float]] = []
        self.now = 100.0
        self.sleeps: list[float] = []

    def run(self, argv: Sequence[str], *, timeout: float, env: Any = None) -> CommandResult:
        self.calls.append((tuple(argv), timeout))
        self.now += 0.5  # each attempt takes half a second
        failing = len(self.calls) <= self.failures
        return CommandResult(
            argv=tuple(argv),
            cwd=None,
            returncode=1 if failing else 0,
            stdout="" if failing else self.ok_output,
            stderr=f"ERROR: amdgpu not ready (attempt {len(self.calls)})" if failing else "",
            duration_s=0.5,
        )

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def deps(self, present: Sequence[str] = ("rocm-smi",)) -> GpuWaitDeps:
        return GpuWaitDeps(
            run=self.run,
            sleep=self.sleep,
            clock=lambda: self.now,
            which=lambda name, path: f"/usr/bin/{name}" if name in present else None,
        )


def test_wait_succeeds_after_failures_with_doubling_capped_backoff() -> None:
    tool = FakeTool(failures=5)
    result = wait_for_gpus(GpuWaitOptions(timeout=120, backoff_cap=8), {"PATH": "/x"}, tool.deps())
    assert result.gpus == 8
    assert len(result.attempts) == 6
    assert [a.ready for a in result.attempts] == [False] * 5 + [True]
    assert tool.sleeps == [1, 2, 4, 8, 8]
    assert result.tool == "rocm-smi"


def test_wait_gives_up_at_the_deadline_with_last_output() -> None:
    tool = FakeTool(failures=10**6)
    with pytest.raises(GpuNotReady) as caught:
        wait_for_gpus(GpuWaitOptions(timeout=20, backoff_cap=4), {}, tool.deps())
    err = caught.value
    assert "amdgpu not ready" in str(err)
    assert f"(attempt {len(tool.calls)})" in str(err)  # the *last* attempt's output
    # bounded: the sleeps never go past the deadline, and the attempts stop there
    assert sum(tool.sleeps) <= 20
    assert tool.now - 100.0 <= 20 + 0.5 + 1e-9
    assert err.details["attempts"][-1]["returncode"] == 1
    assert err.exit_code == 1


def test_each_attempt_timeout_is_cut_to_the_time_left() -> None:
    tool = FakeTool(failures=10**6)
    with pytest.raises(GpuNotReady):
        wait_for_gpus(GpuWaitOptions(timeout=5, attempt_timeout=30), {}, tool.deps())
    assert all(timeout <= 5 for _argv, timeout in tool.calls)


def test_exit_zero_with_too_few_gpus_is_not_ready() -> None:
    tool = FakeTool(failures=0, ok_output=ROCM_SMI_NONE)
    with pytest.raises(GpuNotReady, match="showed 0 GPUs"):
        wait_for_gpus(GpuWaitOptions(timeout=3), {}, tool.deps())


def test_expect_gpus_requires_at_least_that_many() -> None:
    tool = FakeTool(failures=0, ok_output=ROCM_SMI_SHOWID)
    with pytest.raises(GpuNotReady, match=r"need 4"):
        wait_for_gpus(GpuWaitOptions(timeout=2, expect=4), {}, tool.deps())
    assert wait_for_gpus(GpuWaitOptions(timeout=2, expect=2), {}, tool.deps()).gpus == 2


def test_the_first_tool_of_the_order_found_on_path_is_used() -> None:
    tool = FakeTool(failures=0, ok_output=AMD_SMI_LIST)
    result = wait_for_gpus(GpuWaitOptions(), {}, tool.deps(present=("amd-smi", "rocminfo")))
    assert result.tool == "amd-smi"
    assert tool.calls[0][0] == ("/usr/bin/amd-smi", "list")


def test_no_tool_on_path_fails_at_once_with_a_hint() -> None:
    tool = FakeTool(failures=0)
    with pytest.raises(GpuNotReady, match="none of rocm-smi, amd-smi, rocminfo") as caught:
        wait_for_gpus(GpuWaitOptions(), {"PATH": "/nowhere"}, tool.deps(present=()))
    assert "--no-gpu-wait" in (caught.value.hint or "")
    assert tool.calls == []
