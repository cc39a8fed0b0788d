"""Fixtures of the registry integration tests."""

from __future__ import annotations

import ssl
import threading
from typing import Any

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


@pytest.fixture
def handshakes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread of every socket actually wrapped (handshake) by an SSL context."""
    seen: list[str] = []
    wrap = ssl.SSLContext.wrap_socket

    def recording(self: ssl.SSLContext, sock: Any, *args: Any, **kw: Any) -> ssl.SSLSocket:
        seen.append(threading.current_thread().name)
        return wrap(self, sock, *args, **kw)

    monkeypatch.setattr(ssl.SSLContext, "wrap_socket", recording)
    return seen
