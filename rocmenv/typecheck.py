"""What the type checker reads, at run time without importing ``typing`` (issue 20).

Importing ``typing`` costs ~2–3 ms, on every ``rocmenv run``. The modules of the run path
import typing's names under ``if TYPE_CHECKING:``, with a local ``TYPE_CHECKING = False``
(mypy and ruff read that name as ``typing.TYPE_CHECKING``), and keep their ``Literal``
aliases there too. The few names Python itself evaluates — the base of a protocol or of a
generic class, a type variable inside it, :func:`cast` — come from here in the ``else``
branch: mypy checks typing's, Python runs these, which do nothing. A ``Literal`` alias that a
package's surface names is made on first use by the module's ``__getattr__``
(:func:`literal`), which imports ``typing`` then.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own, without importing typing (this module's point)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: a protocol is mypy's business: at run time a plain base class
Protocol = object


class Generic:
    """``class Job(Generic[T])`` makes a plain class at run time."""

    def __class_getitem__(cls, params: object) -> type:
        return object


def TypeVar(name: str, *constraints: object, **options: object) -> str:
    """A type variable's stand-in: only ever a subscript of :class:`Generic`."""
    return name


def cast(typ: object, value: Any) -> Any:
    """``typing.cast``: the value itself (write the type as a string)."""
    return value


def literal(aliases: dict[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that makes ``Literal[values]`` for the names of ``aliases``
    (``{"EngineName": ENGINE_NAMES}``) when asked, and is an ``AttributeError`` otherwise."""

    def attribute(name: str) -> Any:
        values = aliases.get(name)
        if values is None:
            raise AttributeError(name)
        import typing

        return typing.Literal[values]

    return attribute
