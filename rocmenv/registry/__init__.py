"""The registry side: OCI Distribution API v2.

:mod:`~rocmenv.registry.client` (tags, manifests, blobs, platform resolution, mirrors),
:mod:`~rocmenv.registry.auth` (bearer tokens, Docker credentials),
:mod:`~rocmenv.registry.transport` (urllib3: requests, caps, deadlines, retries),
:mod:`~rocmenv.registry.proxy` (HTTPS_PROXY/NO_PROXY), :mod:`~rocmenv.registry.tls` (trust),
:mod:`~rocmenv.registry.manifest` (media types, digests, platforms).
"""
