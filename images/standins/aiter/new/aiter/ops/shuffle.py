"""Stand-in ``aiter.ops.shuffle``, NEW layout (ROCm/aiter v0.1.14-rc0 and later).

``shuffle_scale`` dispatches as the real one does; ``shuffle_scale_a16w4`` is a wrapper
around it (as since ROCm/aiter #2951).
"""

import torch
from aiter._standin import produce, recorded

__all__ = [
    "shuffle_scale",
    "shuffle_scale_a16w4",
    "shuffle_weight",
    "shuffle_weight_NK",
    "shuffle_weight_a16w4",
]


@recorded("aiter.ops.shuffle.shuffle_weight")
def shuffle_weight(x, layout=(16, 16), use_int4=False):
    return produce("aiter.ops.shuffle.shuffle_weight", x)


@recorded("aiter.ops.shuffle.shuffle_weight_NK")
def shuffle_weight_NK(x, inst_N, inst_K, use_int4=False):
    return produce("aiter.ops.shuffle.shuffle_weight_NK", x)


@recorded("aiter.ops.shuffle.shuffle_weight_a16w4")
def shuffle_weight_a16w4(src, NLane, gate_up):
    return produce("aiter.ops.shuffle.shuffle_weight_a16w4", src)


@recorded("aiter.ops.shuffle.shuffle_scale")
def shuffle_scale(src, experts_cnt=None, is_guinterleave=False, gate_up=False):
    if src is None:
        return src
    if src.dtype == torch.float32:
        return src
    assert src.ndim == 2, "shuffle_scale expects a 2-D scale"
    if not is_guinterleave:
        # e8m0 path: pad to (256, 8) multiples, view, permute (the old e8m0_shuffle body)
        return produce("aiter.ops.shuffle.shuffle_scale", src)
    if experts_cnt is None:
        raise ValueError("experts_cnt is required when is_guinterleave=True")
    if src.shape[0] % experts_cnt:
        raise RuntimeError(
            "shape %r cannot be split into %d experts" % (list(src.shape), experts_cnt)
        )
    # a16w4 path: the old shuffle_scale_a16w4 body
    return produce("aiter.ops.shuffle.shuffle_scale", src)


@recorded("aiter.ops.shuffle.shuffle_scale_a16w4")
def shuffle_scale_a16w4(src, experts_cnt, gate_up):
    inner = shuffle_scale(src, experts_cnt=experts_cnt, is_guinterleave=True, gate_up=gate_up)
    if inner is None or inner is src:
        return inner
    return produce("aiter.ops.shuffle.shuffle_scale_a16w4", inner, inner)
