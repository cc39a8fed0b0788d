import time

from tests.ci.ci_register import register_rocm_ci

# a nightly-only test of the PR suite: the nightly and weekly cadences run it, a PR never
register_rocm_ci(3, "stage-c-4-gpu-mi350", labels=["amd"], nightly=True)

time.sleep(0.5)
print("fsdp soak: ok")
