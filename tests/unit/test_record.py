"""rocmenv.record: the class ``@record`` makes behaves as ``@dataclass(frozen=True, kw_only=True)``
makes it — compared method by method against ``dataclasses`` on the same declaration."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
from typing import Any, ClassVar

import pytest

from rocmenv.record import field, record, replace


def _declare(name: str, decorate: Any, make_field: Any) -> Any:
    class Box:
        """A box."""

        name: str
        size: int = 3
        tags: tuple[str, ...] = ()
        items: tuple[int, ...] = make_field(default_factory=tuple)
        note: str = make_field(default="", compare=False)
        secret: str = make_field(default="s", repr=False)
        KIND: ClassVar[str] = "box"

        def area(self) -> int:
            return self.size * self.size

    Box.__name__ = Box.__qualname__ = name  # picklable as this module's attribute
    return decorate(Box)


Record = _declare("Record", record, field)
Real = _declare("Real", dataclasses.dataclass(frozen=True, kw_only=True), dataclasses.field)

CASES: list[dict[str, Any]] = [
    {"name": "a"},
    {"name": "a", "size": 5, "tags": ("x",), "items": (1, 2), "note": "n", "secret": "t"},
    {"name": "a", "note": "other"},
    {"name": "b", "items": (1, 2)},
]


def _both(kwargs: dict[str, Any]) -> tuple[Any, Any]:
    return Record(**kwargs), Real(**kwargs)


@pytest.mark.parametrize("kwargs", CASES)
def test_repr_eq_and_hash_are_dataclasses_own(kwargs: dict[str, Any]) -> None:
    mine, real = _both(kwargs)
    assert repr(mine).removeprefix("Record") == repr(real).removeprefix("Real")
    for other in CASES:
        theirs_mine, theirs_real = _both(other)
        assert (mine == theirs_mine) == (real == theirs_real)
        assert (mine != theirs_mine) == (real != theirs_real)
        assert (hash(mine) == hash(theirs_mine)) == (hash(real) == hash(theirs_real))
        assert hash(mine) == hash(real)  # the same tuple of compared fields
    assert (mine == real) is False  # another class: NotImplemented both ways
    assert mine.area() == real.area() and mine.KIND == "box"


@pytest.mark.parametrize("kwargs", CASES)
def test_the_instance_holds_the_dataclasses_values_in_declaration_order(
    kwargs: dict[str, Any],
) -> None:
    reordered = dict(reversed(kwargs.items()))  # the call's order is not the instance's
    mine, real = Record(**reordered), Real(**reordered)
    assert list(vars(mine).items()) == list(vars(real).items())


def test_a_list_field_makes_the_instance_unhashable_as_in_a_dataclass() -> None:
    mine, real = _both({"name": "a", "items": [1]})
    for obj in (mine, real):
        with pytest.raises(TypeError, match="unhashable"):
            hash(obj)


def test_defaults_and_factories_are_fresh_per_instance() -> None:
    @record
    class Bag:
        items: list[int] = field(default_factory=list)

    one, two = Bag(), Bag()
    assert one.items == [] and one.items is not two.items
    mine = Record(name="a")
    assert (mine.size, mine.tags, mine.items, mine.note, mine.secret) == (3, (), (), "", "s")
    assert Record.size == Real.size == 3  # a plain default stays on the class


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a",), {}), ((), {}), ((), {"name": "a", "colour": "red"}), ((), {"colour": "red"})],
)
def test_a_wrong_call_raises_the_type_error_a_dataclass_raises(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError) as real:
        Real(*args, **kwargs)
    with pytest.raises(TypeError) as mine:
        Record(*args, **kwargs)
    assert str(mine.value).removeprefix("Record") == str(real.value).removeprefix("Real")


@pytest.mark.parametrize("count", [2, 3])
def test_every_missing_argument_is_named_as_python_names_them(count: int) -> None:
    names = ["alpha", "beta", "gamma"][:count]
    body = {"__annotations__": dict.fromkeys(names, "int"), "__module__": __name__}
    real: Any = dataclasses.dataclass(frozen=True, kw_only=True)(type("Many", (), dict(body)))
    mine: Any = record(type("Many", (), dict(body)))
    with pytest.raises(TypeError) as expected:
        real()
    with pytest.raises(TypeError, match="missing") as got:
        mine()
    assert str(got.value) == str(expected.value)


def test_an_instance_is_frozen_with_dataclasses_error() -> None:
    mine = Record(name="a")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'name'"):
        mine.name = "b"
    with pytest.raises(dataclasses.FrozenInstanceError):
        del mine.size
    with pytest.raises(AttributeError):  # FrozenInstanceError is one
        mine.other = 1


def test_dataclasses_fields_replace_asdict_see_the_same_fields() -> None:
    mine, real = _both(CASES[1])
    assert all(map(dataclasses.is_dataclass, (mine, Record)))  # (no narrowing to a type)
    shape = [(f.name, f.type, f.default, f.default_factory, f.repr, f.compare, f.kw_only)
             for f in dataclasses.fields(Real)]  # fmt: skip
    assert [(f.name, f.type, f.default, f.default_factory, f.repr, f.compare, f.kw_only)
            for f in dataclasses.fields(mine)] == shape  # fmt: skip
    assert dataclasses.asdict(mine) == dataclasses.asdict(real)
    changed = dataclasses.replace(mine, size=9)
    assert type(changed) is Record and changed.size == 9 and changed.name == "a"
    assert replace(mine, size=9) == changed == mine.__replace__(size=9)  # copy.replace (3.13)
    with pytest.raises(TypeError):
        replace(mine, colour="red")


def test_copy_and_pickle_keep_the_value() -> None:
    mine = Record(name="a", tags=("x",), items=(1,))
    assert copy.copy(mine) == mine and copy.deepcopy(mine) == mine
    assert pickle.loads(pickle.dumps(mine)) == mine


def test_methods_the_body_defines_are_kept() -> None:
    @record
    class Named:
        name: str

        def __repr__(self) -> str:
            return f"<{self.name}>"

    assert repr(Named(name="x")) == "<x>"


def test_what_a_record_does_not_support_is_refused_when_the_class_is_made() -> None:
    with pytest.raises(ValueError, match="mutable default"):

        @record
        class Shared:
            items: list[int] = []  # noqa: RUF012 - the mistake under test

    with pytest.raises(TypeError, match="cannot inherit"):

        @record
        class Child(Record):  # type: ignore[misc, valid-type]
            extra: int = 0

    with pytest.raises(TypeError, match="__post_init__"):

        @record
        class Checked:
            n: int

            def __post_init__(self) -> None: ...

    with pytest.raises(ValueError, match="both default and default_factory"):
        field(default=1, default_factory=int)


def test_making_and_using_records_imports_no_dataclasses() -> None:
    probe = (
        "import sys\nfrom rocmenv.record import record, field, replace\n"
        "@record\nclass A:\n    x: int\n    y: list = field(default_factory=list)\n"
        "a = replace(A(x=1), x=2)\nassert a == A(x=2) and hash(A(x=1, y=())) and repr(a)\n"
        "print('dataclasses' in sys.modules, 'inspect' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_init_has_the_dataclass_signature() -> None:
    import inspect

    def shape(cls: Any) -> list[tuple[str, Any, str]]:
        params = inspect.signature(cls).parameters.values()
        return [(p.name, p.kind, repr(p.default)) for p in params]

    assert shape(Record) == shape(Real)
