"""Stand-in ``aiter.utility.fp4_utils``, NEW layout: ``e8m0_shuffle`` calls ``shuffle_scale``."""

from aiter._standin import produce, recorded
from aiter.ops.shuffle import shuffle_scale

__all__ = ["e8m0_shuffle"]


@recorded("aiter.utility.fp4_utils.e8m0_shuffle")
def e8m0_shuffle(scale):
    result = shuffle_scale(scale)
    if result is None or result is scale:
        return result
    return produce("aiter.utility.fp4_utils.e8m0_shuffle", result, result)
