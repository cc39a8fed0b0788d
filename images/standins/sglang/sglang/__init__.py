"""Stand-in for the ``sglang`` distribution in the rocmenv test images (version only)."""

from sglang.version import __version__

__all__ = ["__version__"]
