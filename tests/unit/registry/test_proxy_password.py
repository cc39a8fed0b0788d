"""A proxy's password is masked in every message, as written in its URL and as sent."""

from __future__ import annotations

from rocmenv.redact import redact
from rocmenv.registry.transport import Transport
from rocmenv.settings.registry import RegistrySettings


def test_a_percent_encoded_proxy_password_is_masked_decoded_too() -> None:
    transport = Transport(RegistrySettings(), {})
    try:
        transport._manager("http://proxyuser:s3cr%40t-pw%21@127.0.0.1:8888")
        assert "s3cr@t-pw!" not in redact("proxy said: bad credentials s3cr@t-pw! for you")
        assert "s3cr%40t-pw%21" not in redact("CONNECT via s3cr%40t-pw%21 refused")
    finally:
        transport.close()
