"""typing's run-time names without typing (rocmenv.typecheck, issue 20): the stand-ins do
nothing, and what the type checker reads under ``if TYPE_CHECKING:`` says what runs."""

from __future__ import annotations

import ast
import importlib
import inspect
import typing

import pytest

from rocmenv.typecheck import Generic, Protocol, TypeVar, cast, literal


def _checked_aliases(module: str) -> dict[str, tuple[str, ...]]:
    """The ``Literal`` aliases a module declares under ``if TYPE_CHECKING:``."""
    tree = ast.parse(inspect.getsource(importlib.import_module(module)))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Subscript)
                    and getattr(stmt.value.value, "id", None) == "Literal"
                ):
                    values = stmt.value.slice
                    items = values.elts if isinstance(values, ast.Tuple) else [values]
                    out[stmt.targets[0].id] = tuple(ast.literal_eval(v) for v in items)  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize(
    ("module", "names"),
    [
        ("rocmenv.settings.choices",
         {"EngineKind", "EngineName", "PullPolicy", "GpuIsolation", "GpuDeviceNaming"}),
        ("rocmenv.settings.resolve", {"Origin"}),
    ],
)  # fmt: skip
def test_a_literal_alias_at_run_time_is_the_one_the_type_checker_reads(
    module: str, names: set[str]
) -> None:
    checked = _checked_aliases(module)
    assert set(checked) == names
    loaded = importlib.import_module(module)
    for name, values in checked.items():
        assert typing.get_args(getattr(loaded, name)) == values, name


def test_an_unknown_name_of_a_module_with_aliases_is_still_an_attribute_error() -> None:
    import rocmenv.settings.choices as choices

    with pytest.raises(AttributeError):
        choices.EngineNames  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError):
        literal({"A": ("a",)})("B")


def test_the_stand_ins_do_nothing() -> None:
    T = TypeVar("T")

    class Job(Generic[T]):  # type: ignore[type-arg,valid-type]  # the run-time stand-ins
        pass

    class Shape(Protocol):
        pass

    assert Job.__mro__ == (Job, object) and Shape.__mro__ == (Shape, object)
    value = object()
    assert cast("int", value) is value


def test_the_start_failure_is_the_named_tuple_the_type_checker_reads() -> None:
    from rocmenv.errors import StartFailure

    failure = StartFailure("no such option")
    assert failure == ("no such option", None, 125)
    assert StartFailure._fields == ("message", "option", "exit_code")
    assert "did not start" in (StartFailure.__doc__ or "")
