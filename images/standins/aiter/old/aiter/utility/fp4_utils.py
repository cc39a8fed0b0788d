"""Stand-in ``aiter.utility.fp4_utils``, OLD layout: ``e8m0_shuffle`` does the work itself."""

import torch
from aiter._standin import produce, recorded

__all__ = ["e8m0_shuffle"]


@recorded("aiter.utility.fp4_utils.e8m0_shuffle")
def e8m0_shuffle(scale):
    if scale is None:
        return scale
    if scale.dtype == torch.float32:
        return scale
    assert scale.ndim == 2, "e8m0_shuffle expects a 2-D scale"
    return produce("aiter.utility.fp4_utils.e8m0_shuffle", scale)
