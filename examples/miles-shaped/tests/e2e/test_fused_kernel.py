import sys

from tests.ci.ci_register import register_rocm_ci

register_rocm_ci(est_time=2, suite="stage-c-4-gpu-mi350", labels=["amd"])

print("launching the fused kernel \x1b[1m…\x1b[0m\x00")
sys.stdout.flush()
sys.stderr.write("RuntimeError: HIP error: invalid device function\n")
sys.exit(1)  # a real failure: not an assertion, so no retry
