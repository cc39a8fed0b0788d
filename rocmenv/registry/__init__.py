"""The registry side: OCI Distribution API v2.

:mod:`~rocmenv.registry.client` (tags, manifests, blobs, platform resolution, mirrors),
:mod:`~rocmenv.registry.auth` (bearer tokens, Docker credentials),
:mod:`~rocmenv.registry.transport` (requests, retries, deadlines),
:mod:`~rocmenv.registry.connection` (HTTP/1.1 over sockets),
:mod:`~rocmenv.registry.manifest` (media types, digests, platforms).
"""
