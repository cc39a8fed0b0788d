"""rocmenv.registry.tls: the client context that takes back a socket it already wrapped."""

from __future__ import annotations

import socket
import ssl

from rocmenv.registry.tls import ClientContext, build_context


def test_the_registry_context_hands_back_only_its_own_socket_for_the_same_host() -> None:
    ctx = build_context({}, (), ())
    assert isinstance(ctx, ClientContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    raw = socket.socket()
    try:
        wrapped = ctx.wrap_socket(raw, server_hostname="reg.example", do_handshake_on_connect=False)
        assert ctx.wrap_socket(wrapped, server_hostname="reg.example") is wrapped
        other = build_context({}, (), ())
        for context, name in ((ctx, "other.example"), (other, "reg.example")):
            try:
                again = context.wrap_socket(wrapped, server_hostname=name)
            except (ValueError, OSError):
                continue  # wrapped anew, which an SSL socket refuses: never handed back
            assert again is not wrapped
    finally:
        raw.close()
