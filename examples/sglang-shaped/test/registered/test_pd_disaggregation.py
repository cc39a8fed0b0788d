import time

from ci_register import register_amd_ci

register_amd_ci(est_time=2, stage="stage-b", runner_config="2-gpu-small-amd-mi35x")

print("waiting for the prefill server that never answers")
while True:
    time.sleep(1)
