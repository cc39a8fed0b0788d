"""This example's CI registry, shaped as miles' tests/ci/ci_register.py: each test file
registers itself for a suite. The CI reads the call from the file (its AST) and never runs
it; running the file calls this no-op."""

from __future__ import annotations


def register_rocm_ci(
    est_time: float,
    suite: str,
    *,
    labels: list[str] | None = None,
    nightly: bool = False,
    disabled: str | None = None,
):
    """A ROCm test: labels gate it on the pull request's run-ci-<label> labels; nightly=True
    runs it only in the nightly and weekly cadences; disabled is the reason it never runs."""
    return None
