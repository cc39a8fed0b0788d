from tests.ci.ci_register import register_rocm_ci

register_rocm_ci(
    est_time=50,
    suite="stage-c-4-gpu-mi350",
    labels=["amd"],
    disabled="FIXME: re-enable once this case passes on the MI350 runners.",
)

raise SystemExit("a disabled test must never run")
