"""Shared pytest configuration.

* Every test under ``tests/integration/`` is marked ``integration``. An integration test
  needs the Docker engine (``GET /_ping`` on the socket) and the open test registry
  (``127.0.0.1:5000``, started by ``scripts/setup.sh``). When either is missing the test is
  skipped — unless ``ROCMENV_REQUIRE_ENGINE`` is set, then it fails with the reason
  (CI sets it through ``.ci/run``, so a broken environment can never pass as "skipped").
* Session fixtures that need no engine: ``family`` (``images/family.toml``), ``tagset``
  (the generated ``rocm/sgl-dev`` tags with expected parses), ``docker_available``.
  Engine/registry fixtures live in ``tests/integration/conftest.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import tagset as _tagset
from tests.support import testenv

INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"

_problem_cache: list[str | None] = []


def environment_problem() -> str | None:
    """Why integration tests cannot run (checked once per session), or ``None``."""
    if not _problem_cache:
        _problem_cache.append(testenv.environment_problem())
    return _problem_cache[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("integration") is None:
        return
    problem = environment_problem()
    if problem:
        testenv.missing_environment(problem)


@pytest.fixture(scope="session")
def docker_available() -> bool:
    """Whether the Docker engine answers ``/_ping`` (checked once)."""
    return testenv.engine_ping() is None


@pytest.fixture(scope="session")
def family() -> testenv.Family:
    """The test image family (``images/family.toml``): ``family["demo"].ref`` etc."""
    return testenv.load_family()


@pytest.fixture(scope="session")
def tagset() -> _tagset.TagSet:
    """The generated ``rocm/sgl-dev`` tag set with the expected parse of every tag."""
    return _tagset.generate_tagset()
