import time

from ci_register import register_amd_ci
from probe import visible_gpus

register_amd_ci(est_time=5, suite="nightly-amd-8-gpu-mi35x", nightly=True)

time.sleep(1.0)
assert len(visible_gpus()) == 8, visible_gpus()
print("deepseek on 8 GPUs: ok")
