"""Shared pytest configuration.

* Every test under ``tests/integration/`` is marked ``integration``. An integration test
  needs the Docker engine (``GET /_ping`` on the socket) and the open test registry
  (``127.0.0.1:5000``, started by ``scripts/setup.sh``). When either is missing the test is
  skipped — unless ``ROCMENV_REQUIRE_ENGINE`` is set, then it fails with the reason
  (CI sets it through ``.ci/run``, so a broken environment can never pass as "skipped").
* ``@pytest.mark.requires("git")`` (any kind of :data:`testenv.ENVIRONMENT_KINDS`): the
  test runs only where :func:`testenv.environment_problem_of` finds the environment, and
  goes through :func:`testenv.missing_environment` otherwise.
* Under ``ROCMENV_REQUIRE_ENGINE=1`` every skip is a failure, whatever raised it (a
  ``skipif``, a module-level skip, ``importorskip``): nothing can pass as "skipped" in CI.
  A value other than 1/true/yes/0/false/no is a usage error.
* Session fixtures that need no engine: ``family`` (``images/family.toml``), ``tagset``
  (the generated ``rocm/sgl-dev`` tags with expected parses), ``docker_available``.
  Engine/registry fixtures live in ``tests/integration/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Generator
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "requires(kind): needs an environment of tests.support.testenv.ENVIRONMENT_KINDS "
        "(skips, or fails under ROCMENV_REQUIRE_ENGINE=1, where it is missing)",
    )
    try:
        testenv.require_engine()
    except testenv.RequireFlagError as exc:
        raise pytest.UsageError(str(exc)) from None


def _skip_as_failure(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Under ROCMENV_REQUIRE_ENGINE a skipped report becomes a failed one, with its reason."""
    if not report.skipped or hasattr(report, "wasxfail") or not testenv.require_engine():
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"{testenv.REQUIRE_VAR} is set, so a skip is a failure: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    _skip_as_failure(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, None]:
    outcome = yield
    _skip_as_failure(outcome.get_result())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("requires"):
        testenv.need(*mark.args)
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
