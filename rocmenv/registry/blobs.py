"""Large blobs (image layers) streamed from a registry: chunks hashed on the way, resumed with
``Range`` after a dropped connection, with the client's auth, TLS trust and proxy. Small
blobs (configs) are :meth:`rocmenv.registry.client.RegistryClient.get_blob`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from rocmenv.errors import RegistryProtocolError, RegistryUnavailable
from rocmenv.grammar.reference import Reference, validate_digest

if TYPE_CHECKING:
    from rocmenv.registry.client import RegistryClient


def open_blob(
    client: RegistryClient, ref: Reference, host: str, digest: str, *, max_bytes: int = 64 << 30
) -> Iterator[bytes]:
    """A (large) blob as 1 MiB chunks, hashed on the way (:class:`DigestMismatch` after
    the last), resumed with ``Range`` after a dropped connection (3 times). Auth by a
    ``HEAD`` through :meth:`RegistryClient.request`; the same TLS trust (certs.d, SSL_CERT_FILE,
    insecure) and proxy as the transport; no registry credentials to a redirect."""
    import hashlib
    import http.client
    import urllib.error
    import urllib.request

    from rocmenv.errors import DigestMismatch
    from rocmenv.registry.proxy import proxy_for
    from rocmenv.registry.tls import build_context, trust_inputs

    validate_digest(digest)
    path = f"/v2/{ref.path}/blobs/{digest}"
    head = client.request(ref, host, "HEAD", path, kind="blob-head")
    if head.status == 404:
        raise client.not_found(ref, host, head, f"blob {digest}")
    url = f"{client.scheme_for(host)}://{host}{path}"
    env = client.ctx.env
    verify = not client.transport.is_insecure(host)
    context = build_context(env, *trust_inputs(host, env, host), verify=verify)
    proxy = proxy_for(url, env, client.settings.proxy, client.settings.no_proxy)
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context),
        urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {}),
    )
    auth = client.auth_header(host, f"repository:{ref.path}:pull")
    hasher, done, failures = hashlib.sha256(), 0, 0
    while True:
        request = urllib.request.Request(url, headers={"Range": f"bytes={done}-"} if done else {})
        for key, value in auth.items():
            request.add_unredirected_header(key, value)
        try:
            with opener.open(request, timeout=client.settings.timeout) as resp:
                client.stats.add("blob-stream")
                if done and resp.status != 206:
                    raise RegistryProtocolError(f"{host}: blob {digest}: Range refused")
                while data := resp.read(1 << 20):
                    done += len(data)
                    if done > max_bytes:
                        raise RegistryProtocolError(
                            f"{host}: blob {digest} is over {max_bytes} bytes"
                        )
                    hasher.update(data)
                    yield data
        except (OSError, urllib.error.URLError, http.client.HTTPException) as err:
            failures += 1
            if failures > 3:
                raise RegistryUnavailable(
                    f"{host}: reading blob {digest} of {ref.name} failed after {done} bytes: {err}",
                    hint="check the network; the layers read so far are kept",
                ) from None
            continue
        break
    if f"sha256:{hasher.hexdigest()}" != digest:
        raise DigestMismatch(f"blob {ref.name}@{digest} from {host}: the bytes do not match")
