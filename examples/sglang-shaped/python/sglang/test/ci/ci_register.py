"""This example's CI registry, shaped as sglang's python/sglang/test/ci/ci_register.py: a
test file registers itself for the CUDA and the AMD CI. The CI reads the calls from the file
(its AST) and never runs them; running the file calls these no-ops.

A registration names its suite by ``suite`` or, newer, by ``stage`` and ``runner_config``:
the suite is then ``f"{stage}-test-{runner_config}"``."""

from __future__ import annotations


def register_cuda_ci(
    est_time: float,
    suite: str | None = None,
    nightly: bool = False,
    disabled: str | None = None,
    *,
    stage: str | None = None,
    runner_config: str | None = None,
):
    return None


def register_amd_ci(
    est_time: float,
    suite: str | None = None,
    nightly: bool = False,
    disabled: str | None = None,
    *,
    stage: str | None = None,
    runner_config: str | None = None,
):
    return None
