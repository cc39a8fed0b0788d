import time

from tests.ci.ci_register import register_rocm_ci
from tests.ci.probe import visible_gpus

register_rocm_ci(5, "nightly-stage-c-8-gpu-mi350", labels=["amd"], nightly=True)

time.sleep(1.0)
assert len(visible_gpus()) == 8, visible_gpus()
print("long context on 8 GPUs: ok")
