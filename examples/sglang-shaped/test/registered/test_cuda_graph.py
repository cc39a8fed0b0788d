from ci_register import register_cuda_ci

register_cuda_ci(est_time=30, suite="stage-b-test-small-1-gpu")  # CUDA only: not an AMD test

raise SystemExit("a CUDA-only test must never run on the AMD CI")
