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
* Engine and registry fixtures, for the integration tests and the harness's own tests
  (``tests/support/test_*.py``):

  Session fixtures (``scripts/setup.sh`` provides what they point at):

  * ``registry`` → :class:`tests.support.testenv.OpenRegistry`: ``.host`` ``"127.0.0.1:5000"``,
    ``.url``, ``.client()``, ``.push_manifest_copy(src_ref, dst_repo, tag)``,
    ``.unique_repo(prefix)``, ``.tags(repo)``, ``.digest(repo, tag)``;
  * ``auth_registry`` → :class:`tests.support.testenv.AuthRegistry`: ``.host``
    ``"127.0.0.1:5001"``, ``.username``, ``.password``, ``.token_server_url``, ``.realm``,
    ``.service``, ``.private_repo``/``.private_tags``, ``.public_repo``/``.public_tags``,
    ``.client(anonymous=False)``, ``.push_manifest_copy(...)``;
  * ``docker_config_dir`` → a directory with a ``config.json`` holding credentials for the
    auth registry (point ``DOCKER_CONFIG`` at it, e.g. ``monkeypatch.setenv``).

  ``slurm`` → the root of the stand-in 8-GPU host of the Slurm test bed (fails under
  ``ROCMENV_REQUIRE_ENGINE`` when Slurm cannot run a GPU job).

  Function fixture: ``scratch_repo`` → a repository name nobody else uses
  (``rocmenv-test/<test-name>-<hex>``), for tests that push or move tags.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Generator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from tests.support import tagset as _tagset
from tests.support import testenv

pytest_plugins = ["tests.support.forked"]  # @pytest.mark.forked: tests that signal themselves

INTEGRATION_DIR = Path(__file__).resolve().parent / "integration"

_problem_cache: list[str | None] = []


def environment_problem() -> str | None:
    """Why integration tests cannot run (checked once per session), or ``None``."""
    if not _problem_cache:
        _problem_cache.append(testenv.environment_problem())
    return _problem_cache[0]


# Property tests: the same examples on every run (derandomised, no example database to carry
# state between runs), so a clean CI run is reproducible; `make explore` (ROCMENV_HYPOTHESIS=
# explore) runs them ten times longer with fresh randomness to look for new failures.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
hypothesis_settings.register_profile("explore", derandomize=False, database=None,
                                     max_examples=5000)  # fmt: skip
hypothesis_settings.load_profile(os.environ.get("ROCMENV_HYPOTHESIS", "ci"))


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
    isolate_site_config()
    interruptible_children()


def interruptible_children() -> None:
    """The processes tests start get SIGINT at its default action, as from a terminal,
    whatever started pytest: a non-interactive shell's background job, ``nohup``-like
    wrappers and pytest-xdist's workers run with SIGINT *ignored*, which every child then
    inherits across ``exec`` — and a ``rocmenv run`` whose SIGINT lands during Python's own
    start-up (before rocmenv installs its handler) would never see it (a "lost" interrupt
    that is the harness's, not rocmenv's)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: Where the tests' rocmenv looks for "/etc/rocmenv/config.toml": a path that never exists.
NO_SITE_CONFIG = Path("/nonexistent/rocmenv-tests/etc/rocmenv/config.toml")


def isolate_site_config() -> None:
    """No test reads the machine's real site configuration by accident: an empty
    ``ROCMENV_SITE_CONFIG`` (no site file) for every process that inherits the environment
    (the CLI run as a subprocess, ``Context()``), and for contexts built with an environment
    of their own, the default location moved to a path that does not exist. A test that
    wants a site file names one with ``ROCMENV_SITE_CONFIG``."""
    import rocmenv.settings.site as site

    os.environ["ROCMENV_SITE_CONFIG"] = ""
    site.SYSTEM_SITE_CONFIG = NO_SITE_CONFIG  # type: ignore[misc]


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


#: Each test's deadline by tier (pytest-timeout, ``signal`` method): a test over it fails
#: with its name and the stack it hung in, and the run goes on — a hang is never a catch
#: that ends the job at CI's limit. Generous: the slowest of each tier on two busy cores
#: takes a fraction of it (unit ~10 s, integration ~90 s, serial: a Slurm suite ~3 min).
#: A test that needs more says so with its own ``@pytest.mark.timeout(N)``.
TIMEOUTS = {"unit": 60.0, "integration": 300.0, "serial": 600.0}


#: The permission-sensitive tests (processes, files, the engine): scripts/test.sh runs them a
#: second time as an ordinary user (``-m as_user``), so the paths root never takes — EPERM
#: from another user's process, a file it may not open, the engine's socket through the
#: docker group — are exercised. A test whose set-up only root can make (a device node, a
#: file capability, another user's file) is marked ``root_only`` beside its reason.
AS_USER = (
    "unit/engine", "unit/run", "unit/test_hostfs.py", "unit/image/test_lock.py",
    "unit/contents/test_store.py", "unit/settings", "unit/container/test_hostpaths.py",
    "unit/bootstrap", "unit/suite/test_warm.py", "unit/suite/test_allocation.py",
    "unit/cli/test_hostile_inputs.py", "unit/registry/test_auth.py",
    "integration/engine/test_gc.py", "integration/engine/test_engine_api.py",
    "integration/run/test_signals.py", "integration/run/test_planted.py",
    "integration/suite/test_host_writes.py", "integration/cli/test_doctor.py",
    "integration/test_quickstart.py",
)  # fmt: skip
TESTS_DIR = Path(__file__).resolve().parent


def _as_user(item: pytest.Item) -> bool:
    path = Path(str(item.path)).resolve()
    if TESTS_DIR not in path.parents:  # a test the harness's own tests write elsewhere
        return False
    rel = path.relative_to(TESTS_DIR).as_posix()
    return any(rel == p or rel.startswith(p + "/") for p in AS_USER)


def _rootful_podman(item: pytest.Item) -> bool:
    """The test bed's podman is rootful (its store and socket are root's): a test of it is
    root's alone."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return any(isinstance(v, str) and v.startswith("podman") for v in params)


def tier(item: pytest.Item) -> str:
    if item.get_closest_marker("serial") is not None:
        return "serial"
    return "integration" if item.get_closest_marker("integration") is not None else "unit"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)
        if _uses_slurm(item):
            item.add_marker(pytest.mark.serial)  # one cluster of 8 GPUs for every test
        if _as_user(item):
            item.add_marker(pytest.mark.as_user)
            if _rootful_podman(item):
                item.add_marker(pytest.mark.root_only)
        if item.get_closest_marker("timeout") is None:
            # a forked test (pytest-forked) keeps its deadline in the child that runs it: one
            # that fired in the parent would abandon the child and break the worker
            forked = item.get_closest_marker("forked") is not None
            item.add_marker(pytest.mark.timeout(TIMEOUTS[tier(item)], func_only=forked))


def _uses_slurm(item: pytest.Item) -> bool:
    """The test submits to the Slurm test bed (its ``slurm`` fixture, or a backend param)."""
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get("backend") if callspec is not None else None
    return "slurm" in getattr(item, "fixturenames", ()) or backend == "slurm"


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


@pytest.fixture(scope="session")
def registry() -> testenv.OpenRegistry:
    return testenv.OpenRegistry()


@pytest.fixture(scope="session")
def auth_registry() -> testenv.AuthRegistry:
    reg = testenv.AuthRegistry()
    problem = reg.problem()
    if problem:
        testenv.missing_environment(problem, kind="auth-registry")
    return reg


@pytest.fixture(scope="session")
def slurm() -> Path:
    """The Slurm test bed (one node, 8 stand-in GPUs): the stand-in host's root."""
    problem = testenv.slurm_problem()
    if problem:
        testenv.missing_environment(problem, kind="slurm")
    return testenv.slurm_gpu_root()


@pytest.fixture(scope="session")
def docker_config_dir(
    tmp_path_factory: pytest.TempPathFactory, auth_registry: testenv.AuthRegistry
) -> Path:
    directory = tmp_path_factory.mktemp("docker-config")
    (directory / "config.json").write_text(
        testenv.docker_config_json(
            {auth_registry.host: (auth_registry.username, auth_registry.password)}
        )
    )
    (directory / "config.json").chmod(0o600)
    return directory


@pytest.fixture
def scratch_repo(request: pytest.FixtureRequest) -> str:
    name = re.sub(r"^test_", "", request.node.name)[:40]
    return testenv.unique_repo(name)
