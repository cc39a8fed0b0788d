"""The registry side: OCI Distribution API v2.

:mod:`~rocmenv.registry.client` (manifests, blobs, platform resolution, mirrors),
:mod:`~rocmenv.registry.tag_list` (tag-list pages),
:mod:`~rocmenv.registry.auth` (bearer tokens, Docker credentials),
:mod:`~rocmenv.registry.token_cache` (anonymous tokens between commands),
:mod:`~rocmenv.registry.challenge_cache` (each registry's realm, between commands),
:mod:`~rocmenv.registry.transport` (urllib3: requests, caps, deadlines, retries),
:mod:`~rocmenv.registry.response` (responses, rate limits, counters),
:mod:`~rocmenv.registry.connect` (happy-eyeballs connections),
:mod:`~rocmenv.registry.proxy` (HTTPS_PROXY/NO_PROXY), :mod:`~rocmenv.registry.tls` (trust),
:mod:`~rocmenv.registry.manifest` (media types, digests, platforms).
"""

from __future__ import annotations

from rocmenv.lazy import surface

__all__, __getattr__ = surface(
    __name__,
    {
        "RegistryClient": "client",
    },
)
