"""Stand-in ``aiter.ops.shuffle``, OLD layout (ROCm/aiter v0.1.6.post2 .. v0.1.13.post1).

Has ``shuffle_scale_a16w4`` but no generic scale shuffle. Signatures follow the real file.
"""

import torch  # noqa: F401 - the real module imports torch at top level
from aiter._standin import produce, recorded

__all__ = ["shuffle_scale_a16w4", "shuffle_weight", "shuffle_weight_NK", "shuffle_weight_a16w4"]


@recorded("aiter.ops.shuffle.shuffle_weight")
def shuffle_weight(x, layout=(16, 16), use_int4=False):
    return produce("aiter.ops.shuffle.shuffle_weight", x)


@recorded("aiter.ops.shuffle.shuffle_weight_NK")
def shuffle_weight_NK(x, inst_N, inst_K, use_int4=False):
    return produce("aiter.ops.shuffle.shuffle_weight_NK", x)


@recorded("aiter.ops.shuffle.shuffle_weight_a16w4")
def shuffle_weight_a16w4(src, NLane, gate_up):
    return produce("aiter.ops.shuffle.shuffle_weight_a16w4", src)


@recorded("aiter.ops.shuffle.shuffle_scale_a16w4")
def shuffle_scale_a16w4(src, experts_cnt, gate_up):
    # The real body reshapes [E*N, K/32] e8m0 scales per expert and permutes.
    assert src.ndim == 2, "shuffle_scale_a16w4 expects a 2-D scale"
    if src.shape[0] % experts_cnt:
        raise RuntimeError(
            "shape %r cannot be split into %d experts" % (list(src.shape), experts_cnt)
        )
    return produce("aiter.ops.shuffle.shuffle_scale_a16w4", src)
