import sys

from tests.ci.ci_register import register_rocm_ci
from tests.ci.probe import first_attempt

register_rocm_ci(2, "stage-c-4-gpu-mi350", labels=["amd"])

if first_attempt(__file__):
    print("\x1b[31mFAILED\x1b[0m rollout accuracy", file=sys.stderr)
    raise AssertionError("accuracy 0.61 < 0.62 (a noisy eval: the retry passes)")
print("rollout accuracy 0.64 >= 0.62: ok")
