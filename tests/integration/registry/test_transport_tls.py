"""Which requests skip verification, and which are dialled ahead, against the TLS hub
(tests/support/hub_server.py) on loopback, in process (the mutation run's registry group
runs these: ``scripts/mutation.py``).

An insecure registry is one the user listed under ``[registry] insecure``: a request *for*
it (its token realm, a blob's redirect) is not verified either, whatever host it goes to;
and a host listed there is not verified whichever registry the request is for."""

from __future__ import annotations

import ssl
import threading
from pathlib import Path

import pytest

from rocmenv.errors import RegistryUnavailable
from rocmenv.registry.transport import Transport
from rocmenv.settings.registry import RegistrySettings
from tests.support import testenv

pytestmark = [pytest.mark.integration]


def _untrusted(tmp_path: Path) -> dict[str, str]:
    """An environment in which the hub's test CA is not trusted (an empty certs.d)."""
    (tmp_path / "certs.d").mkdir(exist_ok=True)
    return {"HOME": str(tmp_path), "ROCMENV_CERTS_D": str(tmp_path / "certs.d")}


def _get(transport: Transport, hub: testenv.HubTLS, registry_host: str | None) -> int:
    try:
        return transport.send(
            "GET", f"https://{hub.registry}/v2/", {}, "error", registry_host=registry_host
        ).status
    finally:
        transport.close()


def test_the_hub_s_certificate_is_refused_where_nothing_says_insecure(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    """The premise of the two below: without the test CA, the hub's certificate fails."""
    transport = Transport(RegistrySettings(retries=3), _untrusted(tmp_path))
    with pytest.raises(RegistryUnavailable) as err:
        _get(transport, hub, "reg.example")
    prefix = f"{hub.registry}: the TLS certificate is not trusted ("
    assert err.value.what.startswith(prefix)  # at once: a retry would not change the answer
    assert "certificate verify failed" in err.value.what[len(prefix) :]
    assert err.value.hint == (
        f"add the registry's CA to /etc/docker/certs.d/{hub.registry}/ca.crt, or point "
        "SSL_CERT_FILE/REQUESTS_CA_BUNDLE at it; list it under [registry] insecure only if "
        "unverified HTTPS is acceptable"
    )


def test_a_request_for_an_insecure_registry_is_not_verified_on_another_host(
    hub: testenv.HubTLS, handshakes: list[str], tmp_path: Path
) -> None:
    """The registry ``reg.example`` is insecure; its realm (here: the hub's host) is asked
    without verification, as Docker does for the registry's own requests, and not dialled
    ahead (a verified handshake made ahead would fail)."""
    transport = Transport(
        RegistrySettings(retries=0, insecure=("reg.example",)), _untrusted(tmp_path)
    )
    assert _get(transport, hub, "reg.example") == 401
    assert handshakes == ["MainThread"]


def test_an_insecure_host_is_not_verified_for_another_registry_s_request(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    """The hub's host itself is listed insecure: a request for the (secure) registry
    ``reg.example`` that goes there — a blob's redirect — is not verified either."""
    transport = Transport(
        RegistrySettings(retries=0, insecure=(hub.registry,)), _untrusted(tmp_path)
    )
    assert _get(transport, hub, "reg.example") == 401


def test_a_host_in_no_proxy_is_dialled_ahead_though_a_proxy_is_set(
    hub: testenv.HubTLS, handshakes: list[str], tmp_path: Path
) -> None:
    """``[registry] no-proxy`` applies to the connection made ahead as to the request: the
    hub is reached directly, its handshake made on the dialling thread (the proxy named is
    dead: a request through it would fail)."""
    host = hub.registry.rsplit(":", 1)[0]
    settings = RegistrySettings(retries=0, proxy="http://127.0.0.1:9", no_proxy=(host,))
    transport = Transport(settings, {"HOME": str(tmp_path)})
    assert _get(transport, hub, None) == 401
    assert handshakes == ["rocmenv-predial"]


def _paths_since(hub: testenv.HubTLS, seq: int) -> list[str]:
    import json

    return [e["path"] for e in json.loads(hub._get(f"/_hub/log?since={seq}")[1])]


def _seq(hub: testenv.HubTLS) -> int:
    import json

    return int(json.loads(hub._get("/_hub/seq")[1])["seq"])


def test_over_https_the_path_and_query_are_sent_as_written(
    hub: testenv.HubTLS, tmp_path: Path
) -> None:
    """No path asks for ``/``; no query adds no ``?``."""
    import uuid

    probe = f"/v2/rocmenv-probe-{uuid.uuid4().hex}/tags/list"
    seq = _seq(hub)
    transport = Transport(RegistrySettings(retries=0), {"HOME": str(tmp_path)})
    try:
        assert transport.send("GET", f"https://{hub.registry}", {}, "error").status == 404
        assert transport.send("GET", f"https://{hub.registry}{probe}", {}, "error").status == 401
        transport.send("GET", f"https://{hub.registry}{probe}?n=1", {}, "error")
    finally:
        transport.close()
    paths = _paths_since(hub, seq)
    assert "/" in paths
    assert [p for p in paths if probe in p] == [probe, f"{probe}?n=1"]


def test_over_https_a_redirect_is_returned_to_the_caller_not_followed(
    hub: testenv.HubTLS, handshakes: list[str], tmp_path: Path
) -> None:
    """The hub answers a blob with a 307 to its CDN: the client, not urllib3, decides
    whether to go there and with which headers."""
    import json

    port = hub.registry.rpartition(":")[2]
    transport = Transport(RegistrySettings(retries=0), {"HOME": str(tmp_path)})
    try:
        token = json.loads(
            transport.send(
                "GET",
                f"https://auth.rocmenv.test:{port}/token",
                {},
                "token",
                registry_host=hub.registry,  # trusted through the registry's certs.d
            ).body
        )["token"]
        digest = "sha256:" + "0" * 64
        resp = transport.send(
            "GET",
            f"https://{hub.registry}/v2/library/x/blobs/{digest}",
            {"Authorization": f"Bearer {token}"},
            "blob",
        )
    finally:
        transport.close()
    assert resp.status == 307
    # the realm, trusted through its registry's certs.d, was dialled ahead with that trust
    # (and its handshake used); the registry's own connection came after
    assert handshakes == ["rocmenv-predial", "MainThread"]
    assert resp.headers["location"].startswith(f"https://cdn.rocmenv.test:{port}/blobs/{digest}?")


class _TlsScript:
    """A TLS server on loopback with the test bed's certificate (untrusted here) that treats
    each connection by the next of ``acts``: ``answer`` (a 200 over TLS), ``hang-up`` (the
    handshake, the request read, then closed without an answer). Whatever is left over
    (plain HTTP sent to it) fails its handshake."""

    def __init__(self, acts: list[str]) -> None:
        import socket

        tls = testenv.state_dir() / "tls"
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(tls / "server.crt"), str(tls / "server.key"))
        self.acts = list(acts)
        self.seen: list[str] = []
        self.received: list[bytes] = []  # each request, head and body
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.host = f"127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.server.accept()
            except OSError:
                return
            act = self.acts.pop(0) if self.acts else "refuse"
            try:
                conn = self.context.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                self.seen.append("not tls")
                raw.close()
                continue
            with conn:
                self.received.append(self._request(conn))
                self.seen.append(act)
                if act == "answer":
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\ntls"
                    )

    @staticmethod
    def _request(conn: ssl.SSLSocket) -> bytes:
        """The request's head and as much of its body as its ``Content-Length`` gives."""
        with conn.makefile("rb") as reader:  # closed, or the socket outlives ``with conn``
            head, length = b"", 0
            while (line := reader.readline(65536)) not in (b"\r\n", b""):
                head += line
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            return head + b"\r\n" + reader.read(length)

    def seen_after(self, count: int) -> list[str]:
        """What the server saw, once it has seen ``count`` connections (or 10 s passed): the
        client can have its error before the server thread has noted the last one."""
        import time

        deadline = time.monotonic() + 10
        while len(self.seen) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(self.seen)

    def close(self) -> None:
        self.server.close()


def test_an_insecure_registry_whose_tls_breaks_off_is_tried_over_plain_http(
    tmp_path: Path,
) -> None:
    """Docker's order for an insecure registry: HTTPS, and plain HTTP when HTTPS fails — here
    the handshake succeeds but the answer never comes."""
    server = _TlsScript(["hang-up"])
    transport = Transport(
        RegistrySettings(retries=0, insecure=(server.host,)), _untrusted(tmp_path)
    )
    try:
        with pytest.raises(RegistryUnavailable) as err:
            transport.send_with_retries("GET", f"https://{server.host}/v2/", {}, "ping")
    finally:
        transport.close()
        server.close()
    assert server.seen_after(2) == ["hang-up", "not tls"]  # then the plain-HTTP request
    assert err.value.what.startswith(f"GET http://{server.host}/v2/ failed after 1 attempts: ")


def test_an_insecure_registry_that_answered_over_tls_is_not_downgraded_to_plain_http(
    tmp_path: Path,
) -> None:
    """Once the registry has answered over TLS, a later broken answer is a failure to
    retry over TLS, never a reason to send the request in clear (a man in the middle that
    cuts a connection would get it otherwise)."""
    server = _TlsScript(["answer", "hang-up"])
    transport = Transport(
        RegistrySettings(retries=0, insecure=(server.host,)), _untrusted(tmp_path)
    )
    try:
        first = transport.send_with_retries("GET", f"https://{server.host}/v2/", {}, "ping")
        with pytest.raises(RegistryUnavailable) as err:
            transport.send_with_retries("GET", f"https://{server.host}/v2/", {}, "ping")
    finally:
        transport.close()
        server.close()
    assert first.body == b"tls"
    assert server.seen == ["answer", "hang-up"]  # noted before each close: no plain HTTP
    assert err.value.what.startswith(f"GET https://{server.host}/v2/ failed after 1 attempts: ")


def test_a_post_over_https_sends_its_body(tmp_path: Path) -> None:
    """An OAuth2 token request is a form POST, usually over HTTPS: its body must go out on
    the TLS path as on the plain one (no in-process TLS test sent a body before)."""
    server = _TlsScript(["answer"])
    transport = Transport(
        RegistrySettings(retries=0, insecure=(server.host,)), _untrusted(tmp_path)
    )
    form = b"grant_type=refresh_token&service=registry&refresh_token=abc"
    try:
        answer = transport.send(
            "POST",
            f"https://{server.host}/token",
            {"Content-Type": "application/x-www-form-urlencoded"},
            "token",
            body=form,
        )
    finally:
        transport.close()
        server.close()
    assert answer.body == b"tls"
    assert server.seen == ["answer"]
    head, _, sent = server.received[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /token HTTP/1.1\r\n")
    assert sent == form
