"""Fixtures of the registry integration tests."""

from __future__ import annotations

import pytest

from tests.support import testenv


@pytest.fixture(scope="module")
def hub() -> testenv.HubTLS:
    """The TLS registry with Docker Hub's habits and its forward proxy (scripts/setup.sh)."""
    bed = testenv.HubTLS()
    problem = bed.problem()
    if problem:
        testenv.missing_environment(problem)
    return bed
