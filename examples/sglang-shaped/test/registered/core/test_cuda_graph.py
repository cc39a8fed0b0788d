from sglang.test.ci.ci_register import register_cuda_ci

register_cuda_ci(est_time=30, stage="stage-b", runner_config="1-gpu-small")  # CUDA only

raise SystemExit("a CUDA-only test must never run on the AMD CI")
