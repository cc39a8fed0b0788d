"""This example's CI registry: a test file registers itself for the CUDA and the AMD CI
(the CI reads the calls from the file; running the file only records them)."""

REGISTERED = []


def register_cuda_ci(est_time, suite=None, *, nightly=False, disabled=None):
    REGISTERED.append(("cuda", est_time, suite, nightly, disabled))


def register_amd_ci(
    est_time, suite=None, *, stage=None, runner_config=None, nightly=False, disabled=None
):
    REGISTERED.append(("amd", est_time, suite or (stage, runner_config), nightly, disabled))
