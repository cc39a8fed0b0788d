"""Stand-in for ``aiter`` (ROCm/aiter) in the rocmenv test images.

Like the real package, importing ``aiter`` imports ``torch`` and does not export
``__version__`` (that lives in ``aiter/_version.py``). Every stand-in kernel records its
calls (see ``aiter._standin``).
"""

import torch  # noqa: F401 - the real aiter imports torch first thing

from aiter.ops.shuffle import *  # noqa: F403 - the real package re-exports its ops
