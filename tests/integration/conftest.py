"""Fixtures for tests against the real Docker engine and the local registries.

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

import re
from pathlib import Path

import pytest

from tests.support import testenv


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
