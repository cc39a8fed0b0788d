"""``@record``: ``@dataclass(frozen=True, kw_only=True)`` made in one step, for the run path.

Hand-written (conventions rule 11) because the standard library's is what a user waits for
on every ``rocmenv run``: on Python 3.10–3.12 ``dataclasses`` compiles each generated method
with its own ``exec`` (six for a frozen class: ``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__``, ``__delattr__``) and importing it imports ``inspect`` (with
``ast``, ``dis``, ``tokenize``). A record compiles only its ``__init__`` (keyword-only, with
the declared defaults: what catches a wrong call) and shares one ``__repr__``, ``__eq__``,
``__hash__`` and frozen ``__setattr__`` among all records, which read the field names the
class keeps. Measured with ``benchmarks/bench_record.py`` (Python 3.11, 48 classes of 6
fields — the run path's count — 21 interleaved rounds, load average 5.5 on 2 cores):
``dataclasses`` 23.7 ms to import + 80.8 ms for the classes; ``record`` 0.6 + 9.8 ms.

What it makes is the same class ``dataclass(frozen=True, kw_only=True)`` makes, for the
subset rocmenv uses (``tests/unit/test_record.py`` compares every method against
``dataclasses``' own on the same class): keyword-only ``__init__`` with defaults and
``field(default_factory=…)``, ``__repr__`` (``field(repr=False)``), ``__eq__`` and
``__hash__`` over the fields (``field(compare=False)``), ``__setattr__``/``__delattr__``
raising :class:`dataclasses.FrozenInstanceError`, ``__match_args__ = ()``; methods the class
body defines are kept. To the outside a record *is* a dataclass: ``dataclasses.fields``,
``replace``, ``asdict`` and ``is_dataclass`` find its ``__dataclass_fields__``, built by
``dataclasses`` itself from the same declaration the first time anyone asks (that imports
``dataclasses`` then, off the hot path). Not supported, refused at class creation:
inheriting from a record or a dataclass, ``InitVar``, ``__post_init__``, mutable defaults.
:func:`replace` is ``dataclasses.replace`` without the import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_kwargs: Any) -> Callable[[Any], Any]:
        return lambda function: function


__all__ = ["field", "record", "replace"]

_T = TypeVar("_T")
_R = TypeVar("_R")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class _Field:
    """What :func:`field` declares (the real ``dataclasses.Field`` is made on demand)."""

    __slots__ = ("compare", "default", "default_factory", "name", "repr", "type")

    def __init__(self, default: Any, default_factory: Any, repr: bool, compare: bool) -> None:
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.compare = compare
        self.name = ""
        self.type: Any = None


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """``dataclasses.field`` for a record: ``default`` or ``default_factory``, ``repr``,
    ``compare`` (the options rocmenv uses)."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory, repr, compare)


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field,))
def record(cls: type[_T]) -> type[_T]:
    """The class as ``@dataclass(frozen=True, kw_only=True)`` makes it (module docstring)."""
    fields = _declared(cls)
    namespace: dict[str, Any] = {"_r_missing": MISSING, "_r_set": object.__setattr__}
    for f in fields:
        namespace[f"_r_d_{f.name}"] = f.default_factory if f.default is MISSING else f.default
    exec(_source(fields), namespace)  # our own generated text, as in dataclasses
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    made = {"__init__": init, "__repr__": _repr, "__eq__": _eq, "__hash__": _hash}
    for name, function in made.items():
        if name not in cls.__dict__ or (name == "__hash__" and cls.__dict__[name] is None):
            setattr(cls, name, function)
    for name, function in (("__setattr__", _setattr), ("__delattr__", _delattr)):
        if name in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
        setattr(cls, name, function)
    type.__setattr__(cls, "__record_repr__", tuple(f.name for f in fields if f.repr))
    type.__setattr__(cls, "__record_compare__", tuple(f.name for f in fields if f.compare))
    if "__match_args__" not in cls.__dict__:
        type.__setattr__(cls, "__match_args__", ())
    type.__setattr__(cls, "__record_fields__", fields)
    type.__setattr__(cls, "__dataclass_fields__", _DataclassFields())
    return cls


def replace(obj: _R, /, **changes: Any) -> _R:
    """``dataclasses.replace`` for a record: a copy with ``changes``."""
    for f in type(obj).__record_fields__:  # type: ignore[attr-defined]
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return obj.__class__(**changes)


def _declared(cls: type) -> tuple[_Field, ...]:
    """The fields the class body declares, checked as ``dataclasses`` checks them."""
    for base in cls.__mro__[1:]:
        if "__dataclass_fields__" in base.__dict__:
            raise TypeError(f"record {cls.__name__} cannot inherit from {base.__name__}")
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"record {cls.__name__}: __post_init__ is not supported")
    out = []
    annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 - inspect is the cost
    for name, annotation in annotations.items():
        text = annotation if isinstance(annotation, str) else repr(annotation)
        if text.startswith(("ClassVar", "typing.ClassVar", "t.ClassVar")):
            continue
        if name.startswith("_r_"):
            raise TypeError(f"record {cls.__name__}.{name}: the prefix _r_ is the record's own")
        if "InitVar" in text:
            raise TypeError(f"record {cls.__name__}.{name}: InitVar is not supported")
        value = cls.__dict__.get(name, MISSING)
        f = value if isinstance(value, _Field) else _Field(value, MISSING, True, True)
        f.name, f.type = name, annotation
        if f.default is MISSING:
            if name in cls.__dict__:
                delattr(cls, name)
        else:
            if type(f.default).__hash__ is None:  # list, dict, set: shared by every instance
                raise ValueError(
                    f"mutable default {type(f.default)} for field {name} is not allowed: "
                    "use default_factory"
                )
            setattr(cls, name, f.default)
        out.append(f)
    return tuple(out)


def _source(fields: tuple[_Field, ...]) -> str:
    """The text of ``__init__``, the one method compiled per class (the others are shared:
    compiling them was ~80 % of a class's cost)."""
    params, body = [], []
    for f in fields:
        n = f.name
        if f.default_factory is not MISSING:
            params.append(f"{n}=_r_missing")
            body.append(f"    _r_set(self, {n!r}, _r_d_{n}() if {n} is _r_missing else {n})")
        else:
            params.append(n if f.default is MISSING else f"{n}=_r_d_{n}")
            body.append(f"    _r_set(self, {n!r}, {n})")
    star = "*, " if params else ""
    return "\n".join([f"def __init__(self, {star}{', '.join(params)}):", *(body or ["    pass"])])


def _repr(self: Any) -> str:
    cls = self.__class__
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in cls.__record_repr__)
    return f"{cls.__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        names = self.__class__.__record_compare__
        return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in self.__class__.__record_compare__))


def _setattr(self: Any, name: str, value: Any) -> None:
    raise _frozen(name)


def _delattr(self: Any, name: str) -> None:
    raise _frozen(name)


def _frozen(name: str) -> Exception:
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(f"cannot assign to field {name!r}")


class _DataclassFields:
    """``__dataclass_fields__``, made by ``dataclasses`` from the same declaration when first
    asked (``fields``, ``replace``, ``asdict``, ``is_dataclass``), then kept on the class."""

    def __get__(self, instance: object, owner: type) -> dict[str, Any]:
        import dataclasses

        namespace: dict[str, Any] = {"__annotations__": {}, "__module__": owner.__module__}
        for f in owner.__record_fields__:  # type: ignore[attr-defined]
            namespace["__annotations__"][f.name] = f.type
            namespace[f.name] = dataclasses.field(
                default=dataclasses.MISSING if f.default is MISSING else f.default,
                default_factory=(
                    dataclasses.MISSING if f.default_factory is MISSING else f.default_factory
                ),
                repr=f.repr,
                compare=f.compare,
            )
        twin: Any = dataclasses.dataclass(frozen=True, kw_only=True)(
            type(owner.__name__, (), namespace)
        )
        made: dict[str, Any] = twin.__dataclass_fields__
        type.__setattr__(owner, "__dataclass_fields__", made)
        type.__setattr__(owner, "__dataclass_params__", twin.__dataclass_params__)
        return made
