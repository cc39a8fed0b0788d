"""Package surfaces loaded on first use (PEP 562); regular expressions compiled on first use.

A package's ``__init__`` names its public surface, ``name -> submodule``, with
:func:`surface`; nothing is imported until a name is asked for, so ``import rocmenv.container``
(and ``rocmenv --help``) costs nothing. Inside the package, modules import from the module
that defines a name, never from the package itself (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, AnyStr, Generic
else:
    from rocmenv.typecheck import Generic, TypeVar

    AnyStr = TypeVar("AnyStr")


def surface(package: str, names: Mapping[str, str]) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` for ``package``: each name from ``package.<submodule>``."""

    def attribute(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return sorted(names), attribute


class Pattern(Generic[AnyStr]):
    """A regular expression compiled on first use, not at import.

    ``NAME = Pattern(r"...", re.ASCII)`` at module level reads like ``re.compile`` and answers
    the same methods, so a command compiles only the expressions it uses (a ``tags list``
    start-up compiled them all before). Compiling twice from two threads is harmless: both
    results are equal and one of them is kept.
    """

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: AnyStr, flags: int = 0) -> None:
        self._source: AnyStr = source
        self._flags = flags
        self._compiled: re.Pattern[AnyStr] | None = None

    @property
    def compiled(self) -> re.Pattern[AnyStr]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._source, self._flags)
        return compiled

    @property
    def pattern(self) -> AnyStr:
        return self._source

    @property
    def flags(self) -> int:
        return self.compiled.flags

    def match(
        self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize
    ) -> re.Match[AnyStr] | None:
        return self.compiled.match(string, pos, endpos)

    def fullmatch(
        self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize
    ) -> re.Match[AnyStr] | None:
        return self.compiled.fullmatch(string, pos, endpos)

    def search(
        self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize
    ) -> re.Match[AnyStr] | None:
        return self.compiled.search(string, pos, endpos)

    def finditer(
        self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize
    ) -> Iterator[re.Match[AnyStr]]:
        return self.compiled.finditer(string, pos, endpos)

    def findall(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        return self.compiled.findall(string, pos, endpos)

    def split(self, string: AnyStr, maxsplit: int = 0) -> list[AnyStr | Any]:
        return self.compiled.split(string, maxsplit)

    def sub(
        self, repl: AnyStr | Callable[[re.Match[AnyStr]], AnyStr], string: AnyStr, count: int = 0
    ) -> AnyStr:
        return self.compiled.sub(repl, string, count)

    def subn(
        self, repl: AnyStr | Callable[[re.Match[AnyStr]], AnyStr], string: AnyStr, count: int = 0
    ) -> tuple[AnyStr, int]:
        return self.compiled.subn(repl, string, count)

    def __repr__(self) -> str:
        return f"Pattern({self._source!r}, {self._flags!r})"
