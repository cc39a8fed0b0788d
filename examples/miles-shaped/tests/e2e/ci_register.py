"""This example's CI registry: each test file registers itself for a suite (the CI reads the
call from the file; running the file only records it)."""

REGISTERED = []


def register_rocm_ci(est_time, suite, *, labels=None, nightly=False, disabled=None):
    REGISTERED.append((est_time, suite, labels, nightly, disabled))
