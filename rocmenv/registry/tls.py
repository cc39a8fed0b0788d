"""TLS trust for registry connections, as Docker and containers/image set it up.

Trusted: the system store; ``SSL_CERT_FILE``/``SSL_CERT_DIR`` and ``REQUESTS_CA_BUNDLE`` from
the environment; per host, every ``*.crt`` in ``/etc/docker/certs.d/<host[:port]>/`` and
``/etc/containers/certs.d/<host[:port]>/`` (``ROCMENV_CERTS_D`` replaces that list of roots,
colon-separated). A ``client.cert``/``client.key`` pair (any ``*.cert`` with its ``*.key``)
there is presented as the client certificate.

``insecure`` has Docker's meaning: HTTPS without verification first, then plain HTTP.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path

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


def context_for(
    host: str, env: Mapping[str, str], *, verify: bool = True, registry: str | None = None
) -> ssl.SSLContext:
    """The SSL context for connections to ``host`` (``verify=False``: insecure registry).

    ``registry``: the registry the connection is made for (its token realm or blob storage
    is ``host``); its certs.d applies too, as in Docker, where one transport serves both.
    """
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
            bundle = env.get(name)
            if bundle:
                ctx.load_verify_locations(cafile=bundle)
        if env.get("SSL_CERT_DIR"):
            ctx.load_verify_locations(capath=env["SSL_CERT_DIR"])
        hosts = dict.fromkeys((host, registry or host))
        for directory in [d for h in hosts for d in certs_dirs(h, env)]:
            for ca in sorted(directory.glob("*.crt")):
                ctx.load_verify_locations(cafile=str(ca))
            for cert in sorted(directory.glob("*.cert")):
                key = cert.with_suffix(".key")
                if not key.is_file():
                    raise ConfigError(
                        f"client certificate {cert} has no key {key.name} next to it",
                        hint="certs.d needs both NAME.cert and NAME.key (as Docker does)",
                    )
                ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(
            f"cannot load TLS certificates for {host}: {err}",
            hint="check SSL_CERT_FILE, REQUESTS_CA_BUNDLE and /etc/docker/certs.d/"
            f"{host}/ (PEM files, readable)",
        ) from err
    return ctx
