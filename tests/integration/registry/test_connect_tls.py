"""The TLS handshake made on the dialling thread (rocmenv.registry.connect, issue 20 item 2):
used by the first connection, made once, and a failed one reported as urllib3 reports it.
Against the TLS hub (tests/support/hub_server.py) on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmenv.errors import RegistryUnavailable
from rocmenv.registry.transport import Transport
from rocmenv.settings.registry import RegistrySettings
from tests.support import testenv

pytestmark = [pytest.mark.integration]


def test_the_first_connection_takes_the_handshake_made_ahead(
    hub: testenv.HubTLS, handshakes: list[str], tmp_path: Path
) -> None:
    transport = Transport(RegistrySettings(retries=0), {"HOME": str(tmp_path)})
    try:
        resp = transport.send("GET", f"https://{hub.registry}/v2/", {}, "error")
        again = transport.send("GET", f"https://{hub.registry}/v2/", {}, "error")
    finally:
        transport.close()
    assert resp.status == again.status == 401  # the hub's challenge, over verified TLS
    assert handshakes == ["rocmenv-predial"]  # once, ahead; kept alive for the second


def test_a_handshake_ahead_that_fails_is_made_again_and_reported_as_before(
    hub: testenv.HubTLS, handshakes: list[str], tmp_path: Path
) -> None:
    env = {"HOME": str(tmp_path), "ROCMENV_CERTS_D": str(tmp_path)}  # the test CA untrusted
    transport = Transport(RegistrySettings(retries=0), env)
    try:
        with pytest.raises(RegistryUnavailable, match="TLS certificate is not trusted"):
            transport.send("GET", f"https://{hub.registry}/v2/", {}, "error")
    finally:
        transport.close()
    assert handshakes == ["rocmenv-predial", "MainThread"]
