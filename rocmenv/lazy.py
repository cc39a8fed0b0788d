"""Package surfaces loaded on first use (PEP 562).

A package's ``__init__`` names its public surface, ``name -> submodule``, with
:func:`surface`; nothing is imported until a name is asked for, so ``import rocmenv.spec``
(and ``rocmenv --help``) costs nothing. Inside the package, modules import from the module
that defines a name, never from the package itself (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def surface(package: str, names: Mapping[str, str]) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` for ``package``: each name from ``package.<submodule>``."""

    def attribute(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return sorted(names), attribute
