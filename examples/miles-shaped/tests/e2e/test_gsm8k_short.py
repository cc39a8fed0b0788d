import os
import time

from tests.ci.ci_register import register_rocm_ci
from tests.ci.probe import render_nodes, visible_gpus

register_rocm_ci(3, "stage-c-4-gpu-mi350", labels=["amd"])  # est_time and suite positionally

time.sleep(1.5)
print("gsm8k (short):", len(visible_gpus()), "GPUs visible:", render_nodes())
assert len(visible_gpus()) == 4, visible_gpus()
# the job's env: reaches the test (a literal, and an expression the step passes)
assert os.environ.get("MILES_HARDWARE_PLATFORM") == "rocm", "MILES_HARDWARE_PLATFORM"
print(
    "job env: MILES_HARDWARE_PLATFORM=rocm, GITHUB_COMMIT_NAME=" + os.environ["GITHUB_COMMIT_NAME"]
)
print("accuracy 0.81 >= 0.80: ok")
