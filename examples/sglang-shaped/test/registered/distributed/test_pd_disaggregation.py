import time

from sglang.test.ci.ci_register import register_amd_ci

# positionally: est_time, suite, nightly, disabled
register_amd_ci(2, "stage-b-test-2-gpu-amd-mi35x", False, None)

print("waiting for the prefill server that never answers")
while True:
    time.sleep(1)
