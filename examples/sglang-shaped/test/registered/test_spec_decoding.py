from ci_register import register_amd_ci, register_cuda_ci

register_cuda_ci(est_time=60, suite="stage-b-test-small-1-gpu")
register_amd_ci(
    est_time=60,
    suite="stage-b-test-small-1-gpu-amd",
    disabled="flaky on MI35x since the aiter bump; tracked upstream",
)

raise SystemExit("a disabled test must never run")
