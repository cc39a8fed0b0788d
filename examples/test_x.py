"""README demo: ``rocmenv run -- python examples/test_x.py``.

Calls ``aiter.ops.shuffle.shuffle_scale`` the way sglang does, in the main process and in a
``spawn`` worker process, and says who provided the function. On an image whose aiter
predates v0.1.14-rc0 (``rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215``: amd-aiter
0.1.9.post1) the function only exists because rocmenv's launcher added it, in *every*
Python process of the container; ``rocmenv run --no-shims`` shows the ImportError instead.

Runs on the real aiter/torch (CPU tensors are enough) and on the test family's stand-ins.
Also a pytest test: ``rocmenv run -- python -m pytest examples/test_x.py``.
"""

from __future__ import annotations

import multiprocessing
import os
import sys


def shuffle_scale_here(where: str) -> str:
    import torch
    from aiter.ops.shuffle import shuffle_scale

    scale = torch.empty(256, 8, dtype=torch.uint8)  # e8m0 scales of 8 experts, K/32 = 8
    e8m0 = shuffle_scale(scale)  # is_guinterleave=False: the e8m0 shuffle
    moe = shuffle_scale(scale, 8, True, False)  # the a16w4 MoE interleave, positionally
    shim = getattr(shuffle_scale, "_rocmenv_shim", None)
    origin = f"rocmenv shim {shim!r}" if shim else f"{shuffle_scale.__module__} itself"
    done_by = [getattr(t, "produced_by", type(t).__name__) for t in (e8m0, moe)]
    return f"{where} (pid {os.getpid()}): shuffle_scale from {origin}; ran {', '.join(done_by)}"


def test_shuffle_scale_in_main_and_worker_process() -> None:
    print(shuffle_scale_here("main process"))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print(pool.apply(shuffle_scale_here, ("spawn worker",)))


if __name__ == "__main__":
    test_shuffle_scale_in_main_and_worker_process()
    sys.exit(0)
