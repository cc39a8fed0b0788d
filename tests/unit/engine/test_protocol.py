"""Every engine — the two adapters and the in-memory engine of the run tests — has every
method of the :class:`~rocmenv.engine.protocol.Engine` protocol with the protocol's own
parameters (names, kinds, defaults): a signature that drifts in one of them fails here."""

from __future__ import annotations

import inspect

import pytest

from rocmenv.engine.cli_engine import CliEngine
from rocmenv.engine.docker_api import DockerApiEngine
from rocmenv.engine.protocol import Engine
from tests.support.fake_engine import FakeEngine

METHODS = sorted(
    name for name, member in vars(Engine).items() if callable(member) and not name.startswith("_")
)


def parameters(cls: type, name: str) -> list[tuple[str, object, object]]:
    signature = inspect.signature(getattr(cls, name))
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def test_the_protocol_has_the_methods_the_pipeline_calls() -> None:
    assert {"create", "start", "attach", "wait", "kill", "remove", "pull",
            "image_info", "list_containers", "inspect_container", "logs"} <= set(METHODS)  # fmt: skip


@pytest.mark.parametrize("engine", [DockerApiEngine, CliEngine, FakeEngine])
@pytest.mark.parametrize("method", METHODS)
def test_each_engine_implements_each_method_with_the_protocols_signature(
    engine: type, method: str
) -> None:
    assert hasattr(engine, method), f"{engine.__name__} has no {method}"
    assert parameters(engine, method) == parameters(Engine, method)
