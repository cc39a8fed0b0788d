"""``@record``: ``@dataclass(frozen=True, kw_only=True)`` made in one step, for the run path.

Hand-written (conventions rule 11) because the standard library's is what a user waits for
on every ``rocmenv run``: on Python 3.10–3.12 ``dataclasses`` compiles each generated method
with its own ``exec`` (six for a frozen class: ``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__``, ``__delattr__``) and importing it imports ``inspect`` (with
``ast``, ``dis``, ``tokenize``). A record compiles nothing: every record shares one
``__init__`` (keyword-only, the declared defaults, the ``TypeError`` a compiled one raises),
``__repr__``, ``__eq__``, ``__hash__`` and frozen ``__setattr__``, which read the fields the
class keeps; ``inspect.signature`` sees the signature a compiled ``__init__`` would have. Measured with ``benchmarks/bench_record.py`` (Python 3.11, 48 classes of 6 fields — the
run path's count — 21 interleaved rounds, load average 3.8–4.0 on 2 cores): ``dataclasses``
31.3 ms to import + 99.7 ms for the classes; ``record`` 0.7 + 1.4 ms. An instance costs
less too: 2.1 µs against a compiled ``__init__``'s 4.9 µs for ``TagInfo``'s 12 fields (frozen
dataclasses set each field through ``object.__setattr__``; ``timeit``, load ~3).

What it makes is the same class ``dataclass(frozen=True, kw_only=True)`` makes, for the
subset rocmenv uses (``tests/unit/test_record.py`` compares every method against
``dataclasses``' own on the same class): keyword-only ``__init__`` with defaults and
``field(default_factory=…)``, ``__repr__`` (``field(repr=False)``), ``__eq__`` and
``__hash__`` over the fields (``field(compare=False)``), ``__setattr__``/``__delattr__``
raising :class:`dataclasses.FrozenInstanceError`, ``__match_args__ = ()``, ``__replace__``
(``copy.replace`` from Python 3.13); methods the class body defines are kept (the frozen
``__setattr__``/``__delattr__`` cannot be, as in ``dataclasses``). To the outside a record *is* a dataclass: ``dataclasses.fields``,
``replace``, ``asdict`` and ``is_dataclass`` find its ``__dataclass_fields__``, built by
``dataclasses`` itself from the same declaration the first time anyone asks (that imports
``dataclasses`` then, off the hot path). Not supported, refused at class creation:
inheriting from a record or a dataclass, ``InitVar``, ``__post_init__``, mutable defaults.
:func:`replace` is ``dataclasses.replace`` without the import.
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    from typing_extensions import dataclass_transform

    _T = TypeVar("_T")
    _R = TypeVar("_R")
else:

    def dataclass_transform(**_kwargs: Any) -> Callable[[Any], Any]:
        return lambda function: function


__all__ = ["field", "record", "replace"]


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
    made = {"__init__": _init, "__repr__": _repr, "__eq__": _eq, "__hash__": _hash,
            "__replace__": replace}  # fmt: skip
    for name, function in made.items():
        if name not in cls.__dict__ or (name == "__hash__" and cls.__dict__[name] is None):
            setattr(cls, name, function)
    for name, function in (("__setattr__", _setattr), ("__delattr__", _delattr)):
        if name in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
        setattr(cls, name, function)
    type.__setattr__(cls, "__record_fields__", fields)
    type.__setattr__(cls, "__record_names__", frozenset(f.name for f in fields))
    type.__setattr__(cls, "__record_template__", {f.name: f.default for f in fields})
    factories = tuple(
        (f.name, f.default_factory) for f in fields if f.default_factory is not MISSING
    )
    type.__setattr__(cls, "__record_factories__", factories)
    required = tuple(
        f.name for f in fields if f.default is MISSING and f.default_factory is MISSING
    )
    type.__setattr__(cls, "__record_required__", required)
    type.__setattr__(cls, "__record_repr__", tuple(f.name for f in fields if f.repr))
    type.__setattr__(cls, "__record_compare__", tuple(f.name for f in fields if f.compare))
    if "__match_args__" not in cls.__dict__:
        type.__setattr__(cls, "__match_args__", ())
    if "__signature__" not in cls.__dict__:
        type.__setattr__(cls, "__signature__", _Signature())
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


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    """Every record's ``__init__``: keyword-only, the declared defaults, and the
    ``TypeError`` Python gives a compiled one (a compiled ``__init__`` per class was most of
    what making a record cost). The instance's ``__dict__`` is filled in two C-level updates
    (the class's defaults in declaration order, then the arguments): ~2 µs for 12 fields
    where setting them one by one took ~5 (``tags list`` makes one per tag, thousands)."""
    cls = self.__class__
    if args:
        raise TypeError(
            f"{cls.__qualname__}.__init__() takes 1 positional argument but "
            f"{len(args) + 1} were given"
        )
    names = cls.__record_names__
    if not names.issuperset(kwargs):
        unexpected = next(name for name in kwargs if name not in names)
        raise TypeError(
            f"{cls.__qualname__}.__init__() got an unexpected keyword argument {unexpected!r}"
        )
    values = self.__dict__
    values.update(cls.__record_template__)
    values.update(kwargs)
    if len(kwargs) == len(names):
        return
    for name, factory in cls.__record_factories__:
        if name not in kwargs:
            values[name] = factory()
    missing = [repr(name) for name in cls.__record_required__ if name not in kwargs]
    if missing:
        listed = " and ".join(missing) if len(missing) < 3 else ", ".join(missing[:-1])
        listed += f", and {missing[-1]}" if len(missing) >= 3 else ""
        plural = "s" if len(missing) > 1 else ""
        raise TypeError(
            f"{cls.__qualname__}.__init__() missing {len(missing)} required keyword-only "
            f"argument{plural}: {listed}"
        )


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


class _Signature:
    """``__signature__`` for ``inspect.signature``: the keyword-only parameters a compiled
    ``__init__`` would have (``inspect`` imported when asked, not by the run)."""

    def __get__(self, instance: object, owner: type) -> Any:
        import inspect

        def default(f: _Field) -> Any:
            if f.default_factory is not MISSING:
                return _Factory()  # dataclasses shows <factory>
            return inspect.Parameter.empty if f.default is MISSING else f.default

        keyword = inspect.Parameter.KEYWORD_ONLY
        return inspect.Signature(
            [inspect.Parameter(f.name, keyword, default=default(f), annotation=f.type)
             for f in owner.__record_fields__],  # type: ignore[attr-defined]
            return_annotation=None,
        )  # fmt: skip


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"


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
