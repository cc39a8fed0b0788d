"""What a failed round trip means for the registry client: urllib3's exceptions translated
into rocmenv's (retry, fall back to plain HTTP, or stop with a hint), and the messages for
answers too large or names that do not resolve. Used by :mod:`rocmenv.registry.transport`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rocmenv.errors import RegistryProtocolError, RegistryUnavailable
from rocmenv.redact import redact

if TYPE_CHECKING:
    import urllib3


class Transient(Exception):
    """A failure worth retrying (connection trouble, timeouts, truncation)."""


class FallBackToHttp(Exception):
    """An insecure registry that does not speak TLS: try plain HTTP (Docker's order)."""


def translate(
    err: Exception,
    host: str,
    proxy: str | None,
    timeout: urllib3.Timeout,
    *,
    fallback: bool,
    stalled: Callable[[], RegistryUnavailable | None],
) -> Exception:
    """The exception to raise for urllib3's ``err`` on a request to ``host``.

    ``fallback``: an insecure registry not yet seen answering over TLS (a TLS or connection
    failure means: try plain HTTP); ``stalled``: the error when the request's deadline has
    passed (``None`` while it has not)."""
    import urllib3

    exc = urllib3.exceptions
    if isinstance(err, exc.SSLError):
        return FallBackToHttp() if fallback else _tls_failure(host, str(err))
    if isinstance(err, exc.NameResolutionError):
        return unresolved(host, err)
    if isinstance(err, exc.ProxyError):
        cause = getattr(err, "original_error", None)
        if isinstance(cause, exc.NameResolutionError):
            return unresolved(f"proxy {redact(str(proxy))}", cause)
        return Transient(f"{host}: through proxy {redact(str(proxy))}: {short(str(err))}")
    if isinstance(err, (exc.NewConnectionError, exc.ConnectTimeoutError)):
        if fallback:
            return FallBackToHttp()
        if isinstance(err, exc.NewConnectionError):  # refused, unreachable
            reason = str(err).rsplit("Failed to establish a new connection: ", 1)[-1]
        else:  # urllib3's text names its connection object and the address
            reason = f"no connection within {timeout.connect_timeout:g} s"
        return Transient(f"{host}: cannot connect: {short(reason)}")
    if isinstance(err, (exc.ReadTimeoutError, exc.ProtocolError)):
        gone = stalled()
        if gone is not None:
            return gone
        if isinstance(err, exc.ReadTimeoutError):
            return Transient(f"{host}: no answer within {timeout.read_timeout} s")
        if fallback:
            return FallBackToHttp()
    return Transient(f"{host}: {short(str(err))}")


def _tls_failure(host: str, text: str) -> Exception:
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate" in text.lower():
        return RegistryUnavailable(
            f"{host}: the TLS certificate is not trusted ({short(text)})",
            hint=f"add the registry's CA to /etc/docker/certs.d/{host}/ca.crt, or point "
            "SSL_CERT_FILE/REQUESTS_CA_BUNDLE at it; list it under [registry] insecure "
            "only if unverified HTTPS is acceptable",
        )
    return Transient(f"{host}: TLS error: {short(text)}")


def unresolved(what: str, err: Exception) -> RegistryUnavailable:
    """A name that does not resolve: not retried (offline, or a typo — a retry changes
    neither), so an offline command says so at once."""
    reason = str(getattr(err, "__cause__", None) or err).rsplit("] ", 1)[-1]
    return RegistryUnavailable(
        f"{what}: the name does not resolve ({short(reason)})",
        hint="check the name, the DNS and the network (is this machine offline?); a mirror "
        "([registry] mirrors) or a proxy (HTTPS_PROXY) that resolves it may help",
    )


def short(text: str) -> str:
    text = redact(text)
    return text if len(text) <= 200 else text[:200] + "…"


def too_large(host: str, url: str, kind: str, cap: int, how: str) -> RegistryProtocolError:
    return RegistryProtocolError(
        f"{host}: the {kind} response to {redact(url)} {how} than its limit of {cap} bytes"
        if how == "sent more"
        else f"{host}: the {kind} response to {redact(url)} {how}, over its limit of {cap} bytes",
        hint=f"a hostile or broken registry, mirror or proxy; if the registry is right, raise "
        f"[registry] limits.{kind}",
    )
