"""rocmenv: reproducible ROCm (AMD GPU) container environments for CI and developers."""

__all__ = ["__version__"]
__version__ = "0.1.0"
