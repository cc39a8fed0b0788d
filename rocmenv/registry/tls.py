"""TLS trust for registry connections, as Docker and containers/image set it up.

Trusted: the system store; ``SSL_CERT_FILE``/``SSL_CERT_DIR`` and ``REQUESTS_CA_BUNDLE`` from
the environment; per host, every ``*.crt`` in ``/etc/docker/certs.d/<host[:port]>/`` and
``/etc/containers/certs.d/<host[:port]>/`` (``ROCMENV_CERTS_D`` replaces that list of roots,
colon-separated). A ``client.cert``/``client.key`` pair (any ``*.cert`` with its ``*.key``)
there is presented as the client certificate.

``insecure`` has Docker's meaning: HTTPS without verification first, then plain HTTP.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocmenv.errors import ConfigError

DEFAULT_CERTS_ROOTS = ("/etc/docker/certs.d", "/etc/containers/certs.d")


def certs_dirs(host: str, env: Mapping[str, str]) -> list[Path]:
    raw = env.get("ROCMENV_CERTS_D")
    roots = [r for r in raw.split(":") if r] if raw is not None else list(DEFAULT_CERTS_ROOTS)
    found = []
    for root in roots:
        path = Path(root) / host.replace("/", "_")
        if path.is_dir():
            found.append(path)
    return found


def has_certs_dir(host: str, env: Mapping[str, str]) -> bool:
    return bool(certs_dirs(host, env))


def trust_inputs(
    host: str, env: Mapping[str, str], registry: str | None = None
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The CA files and (cert, key) pairs that apply to ``host`` (and its ``registry``)."""
    cas: list[str] = []
    pairs: list[tuple[str, str]] = []
    for directory in [
        d for h in dict.fromkeys((host, registry or host)) for d in certs_dirs(h, env)
    ]:
        cas += [str(p) for p in sorted(directory.glob("*.crt"))]
        for cert in sorted(directory.glob("*.cert")):
            key = cert.with_suffix(".key")
            if not key.is_file():
                raise ConfigError(
                    f"client certificate {cert} has no key {key.name} next to it",
                    hint="certs.d needs both NAME.cert and NAME.key (as Docker does)",
                )
            pairs.append((str(cert), str(key)))
    return tuple(cas), tuple(pairs)


def context_for(
    host: str, env: Mapping[str, str], *, verify: bool = True, registry: str | None = None
) -> ssl.SSLContext:
    """The SSL context for connections to ``host`` (``verify=False``: insecure registry).

    ``registry``: the registry the connection is made for (its token realm or blob storage
    is ``host``); its certs.d applies too, as in Docker, where one transport serves both.
    """
    cas, pairs = trust_inputs(host, env, registry)
    return build_context(env, cas, pairs, verify=verify)


def build_context(
    env: Mapping[str, str],
    cas: tuple[str, ...],
    pairs: tuple[tuple[str, str], ...],
    *,
    verify: bool = True,
) -> ssl.SSLContext:
    """A context trusting the system store, the CA bundle variables and ``cas``, presenting the
    client certificates ``pairs`` (loading the system store costs ~30 ms: share the result)."""
    ctx, loaded = _system_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    where = ", ".join(cas) or "the CA bundle variables"
    try:
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "SSL_CERT_DIR"):
            bundle = env.get(name)
            if not bundle or os.path.realpath(bundle) in loaded:
                continue
            loaded.add(os.path.realpath(bundle))
            where = f"{name}={bundle}"
            if name == "SSL_CERT_DIR":
                ctx.load_verify_locations(capath=bundle)
            else:
                ctx.load_verify_locations(cafile=bundle)
        for ca in cas:
            where = ca
            ctx.load_verify_locations(cafile=ca)
        for cert, key in pairs:
            where = cert
            ctx.load_cert_chain(certfile=cert, keyfile=key)
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(
            f"cannot load TLS certificates from {where}: {err}",
            hint="check SSL_CERT_FILE, REQUESTS_CA_BUNDLE and /etc/docker/certs.d/<host>/ "
            "(PEM files, readable)",
        ) from err
    return ctx


class ClientContext(ssl.SSLContext):
    """A client context that hands back a socket it already wrapped for the same host name
    (the connection dialled and handshaken ahead, :mod:`rocmenv.registry.connect`) where
    urllib3 would wrap it a second time; any other socket is wrapped as usual."""

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        if (
            isinstance(sock, ssl.SSLSocket)
            and sock.context is self
            and kwargs.get("server_hostname") == sock.server_hostname
        ):
            return sock
        return super().wrap_socket(sock, *args, **kwargs)


def _system_context() -> tuple[ssl.SSLContext, set[str]]:
    """A verifying client context with the system store, and the trust paths it covers.

    Where the system store is a hashed certificate directory (Debian's ``/etc/ssl/certs``),
    it is used as one: OpenSSL then reads only the issuer certificates a handshake needs
    (~0.3 ms) instead of parsing the whole bundle file (~20 ms), which on such systems is
    the same certificates concatenated — so ``SSL_CERT_FILE`` pointing at that bundle adds
    nothing and is skipped. Elsewhere: :meth:`ssl.SSLContext.load_default_certs`.
    """
    paths = ssl.get_default_verify_paths()
    system_bundle = os.path.realpath(paths.openssl_cafile) if paths.openssl_cafile else ""
    capath = paths.capath
    ctx = ClientContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificates and host names
    ctx.set_alpn_protocols(["http/1.1"])  # as urllib3 sets it before each handshake
    if capath and os.path.isdir(capath) and any(Path(capath).glob("*.0")):
        ctx.load_verify_locations(capath=capath)
        loaded = {os.path.realpath(capath), system_bundle}
        if paths.cafile and os.path.realpath(paths.cafile) not in loaded:
            ctx.load_verify_locations(cafile=paths.cafile)
            loaded.add(os.path.realpath(paths.cafile))
        return ctx, loaded
    ctx.load_default_certs()
    return ctx, {os.path.realpath(p) for p in (paths.cafile, paths.capath) if p}
