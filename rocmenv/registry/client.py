"""OCI Distribution API v2 client: tags, manifest digests, platform manifests, blobs.

- HTTPS, except for loopback registries and those configured as insecure (plain HTTP).
- Auth: anonymous bearer tokens from the ``WWW-Authenticate`` challenge; credentials from the
  Docker config and credential helpers through docker-py's ``docker.auth`` (imported only when
  a registry actually asks for authentication), Basic auth where a registry asks for it.
- Tag listing follows ``Link: <…>; rel="next"`` pages; ``page_size`` sets ``n=``.
- ``HEAD`` for digests, with every manifest and index media type in ``Accept``.
- Retries with exponential backoff on 429/5xx and connection failures, honouring
  ``Retry-After``; a timeout on every request; manifest and blob bytes are hashed and compared
  with the digest claimed.
- Mirrors: hosts tried in order before the registry itself.
- Every HTTP round trip is counted (:attr:`RegistryClient.stats`); what was fetched once in a
  client's life is not fetched again.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from rocmenv.config import RegistrySettings
from rocmenv.context import Context
from rocmenv.errors import (
    RegistryAuthError,
    RegistryError,
    RegistryNotFound,
    RegistryProtocolError,
    RegistryUnavailable,
)
from rocmenv.reference import Reference, validate_digest
from rocmenv.registry.manifest import (
    ACCEPT_MANIFESTS,
    DOCKER_HUB,
    DOCKER_HUB_API,
    DOCKER_SCHEMA1,
    DOCKER_SCHEMA1_SIGNED,
    Manifest,
    ManifestHead,
    PlatformImage,
    pick_platform,
    sha256_digest,
    verify_digest,
)
from rocmenv.registry.transport import Response, Transport

if TYPE_CHECKING:  # imported on the first 401: open registries never pay for it
    from rocmenv.registry.auth import RegistryAuth


class RegistryClient:
    """One client per command; thread-safe (``drift`` checks images concurrently)."""

    def __init__(
        self,
        ctx: Context,
        settings: RegistrySettings | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.ctx = ctx
        self.settings = settings or RegistrySettings()
        self.transport = Transport(self.settings, ctx.env, sleep)
        self.stats = self.transport.stats
        self._auth: RegistryAuth | None = None
        self._cache: dict[tuple[str, ...], Any] = {}

    @property
    def auth(self) -> RegistryAuth:
        if self._auth is None:
            from rocmenv.registry.auth import RegistryAuth

            self._auth = RegistryAuth(self.ctx, self.transport)
        return self._auth

    def _auth_header(self, host: str, scope: str) -> dict[str, str]:
        return self._auth.header(host, scope) if self._auth is not None else {}

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- hosts ------------------------------------------------------------------------------

    def hosts_for(self, ref: Reference) -> list[str]:
        """Mirrors first (in the configured order), then the registry itself."""
        upstream = DOCKER_HUB_API if ref.domain == DOCKER_HUB else ref.domain
        hosts = list(self.settings.mirrors_for(ref.domain))
        if upstream not in hosts:
            hosts.append(upstream)
        return hosts

    def scheme_for(self, host: str) -> str:
        return self.transport.scheme_for(host)

    def _request(
        self,
        ref: Reference,
        host: str,
        method: str,
        path: str,
        *,
        kind: str,
        accept: str | None = None,
        scope_action: str = "pull",
    ) -> Response:
        """A request to ``host`` for repository ``ref``, authenticating when challenged."""
        scope = f"repository:{ref.path}:{scope_action}"
        url = f"{self.scheme_for(host)}://{host}{path}"
        headers = {"Accept": accept} if accept else {}
        resp = self.transport.send_with_retries(
            method, url, {**headers, **self._auth_header(host, scope)}, kind
        )
        if resp.status == 401:
            challenge = resp.header("www-authenticate")
            if not challenge:
                raise RegistryAuthError(
                    f"{host} refused {method} {path} (HTTP 401) without a challenge"
                )
            if self._auth_header(host, scope):
                self.auth.forget(host, scope)  # expired or revoked: ask for a new one
            self.auth.authenticate(host, ref.domain, scope, challenge)
            resp = self.transport.send_with_retries(
                method, url, {**headers, **self._auth_header(host, scope)}, kind
            )
            if resp.status == 401:
                user = self.auth.user_for(host)
                raise RegistryAuthError(
                    f"{host} refused access to {ref.name} (HTTP 401)"
                    + (f" for user {user!r}" if user else " without credentials"),
                    hint=f"check `docker login {host}` and that the account can pull {ref.path}",
                )
        if resp.status == 403:
            raise RegistryAuthError(
                f"{host} denied access to {ref.name} (HTTP 403)",
                hint="the account lacks permission for this repository",
            )
        return resp

    def _on_hosts(self, ref: Reference, call: Callable[[str], Any]) -> Any:
        """Run ``call(host)`` on the mirrors then the registry; first success wins."""
        errors: list[str] = []
        last: RegistryError | None = None
        hosts = self.hosts_for(ref)
        for host in hosts:
            try:
                return call(host)
            except (RegistryUnavailable, RegistryNotFound) as err:
                if len(hosts) == 1:
                    raise
                errors.append(f"{host}: {err.what}")
                last = err
        assert last is not None
        summary = "; ".join(errors)
        if isinstance(last, RegistryNotFound) and all(" not found" in e for e in errors):
            raise RegistryNotFound(
                f"{ref.name}: not found on any of {', '.join(hosts)} ({summary})", hint=last.hint
            )
        raise RegistryUnavailable(f"{ref.name}: no registry answered ({summary})", hint=last.hint)

    # -- API --------------------------------------------------------------------------------

    def _not_found(self, ref: Reference, host: str, resp: Response, what: str) -> RegistryNotFound:
        code = ""
        try:
            errors = json.loads(resp.body).get("errors") or []
            code = errors[0].get("code", "") if errors else ""
        except (ValueError, AttributeError, IndexError):
            pass
        if code == "NAME_UNKNOWN" or what == "repository":
            return RegistryNotFound(
                f"repository {ref.name} not found on {host}",
                hint="check the repository name (and the registry/mirror it lives on)",
            )
        return RegistryNotFound(
            f"{what} not found in {ref.name} on {host}",
            hint=f"list the available tags with `rocmenv tags list {ref.familiar_name}`",
        )

    def iter_tag_pages(self, ref: Reference, page_size: int | None = None) -> Iterator[list[str]]:
        """Pages of tags as the registry sends them (``n=`` when ``page_size`` is given)."""

        def first(host: str) -> tuple[str, Response]:
            path = f"/v2/{ref.path}/tags/list"
            if page_size:
                path += f"?n={page_size}"
            return host, self._fetch_tag_page(ref, host, path)

        host, resp = self._on_hosts(ref, first)
        seen: set[str] = set()
        while True:
            tags = self._tags_of(ref, host, resp)
            yield tags
            link = resp.header("link")
            next_path = _next_link(link) if link else None
            if not next_path or next_path in seen:
                return
            seen.add(next_path)
            resp = self._fetch_tag_page(ref, host, next_path)

    def _fetch_tag_page(self, ref: Reference, host: str, path: str) -> Response:
        resp = self._request(ref, host, "GET", path, kind="tags")
        if resp.status == 404:
            raise self._not_found(ref, host, resp, "repository")
        if resp.status != 200:
            raise RegistryProtocolError(
                f"{host}: listing tags of {ref.name} answered HTTP {resp.status}"
            )
        return resp

    def _tags_of(self, ref: Reference, host: str, resp: Response) -> list[str]:
        try:
            data = json.loads(resp.body)
            tags = data.get("tags") or []
        except (ValueError, AttributeError):
            raise RegistryProtocolError(
                f"{host}: the tag list of {ref.name} is not JSON ({_snippet(resp.body)})",
                hint="a proxy or captive portal may be answering instead of the registry",
            ) from None
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise RegistryProtocolError(f"{host}: the tag list of {ref.name} is malformed")
        return tags

    def list_tags(self, ref: Reference, page_size: int | None = None) -> list[str]:
        key = ("tags", ref.name, str(page_size))
        if key in self._cache:
            return list(self._cache[key])
        tags: list[str] = []
        for page in self.iter_tag_pages(ref, page_size):
            tags.extend(page)
        self._cache[key] = tuple(tags)
        return tags

    def head_manifest(self, ref: Reference) -> tuple[str, ManifestHead]:
        """The digest a tag (or digest) points at, by ``HEAD`` (no pull-limit cost)."""
        target = ref.digest or ref.tag or "latest"
        key = ("head", ref.name, target)
        if key in self._cache:
            cached: tuple[str, ManifestHead] = self._cache[key]
            return cached

        def call(host: str) -> tuple[str, ManifestHead]:
            resp = self._request(
                ref,
                host,
                "HEAD",
                f"/v2/{ref.path}/manifests/{target}",
                kind="manifest-head",
                accept=ACCEPT_MANIFESTS,
            )
            if resp.status == 404:
                raise self._not_found(ref, host, resp, f"manifest {target!r}")
            if resp.status != 200:
                raise RegistryProtocolError(
                    f"{host}: HEAD manifest {target} answered HTTP {resp.status}"
                )
            digest = resp.header("docker-content-digest")
            media_type = (resp.header("content-type") or "").split(";")[0].strip()
            size = resp.header("content-length")
            if not digest:  # some registries omit it on HEAD: fetch and hash instead
                manifest = self._get_manifest_on(ref, host, target)
                return host, ManifestHead(
                    digest=manifest.digest, media_type=manifest.media_type, size=len(manifest.raw)
                )
            validate_digest(digest)
            return host, ManifestHead(
                digest=digest,
                media_type=media_type,
                size=int(size) if size and size.isdigit() else None,
            )

        result: tuple[str, ManifestHead] = self._on_hosts(ref, call)
        self._cache[key] = result
        return result

    def get_manifest(self, ref: Reference, host: str | None = None) -> tuple[str, Manifest]:
        """The manifest bytes, verified against the digest (requested or claimed)."""
        target = ref.digest or ref.tag or "latest"
        if host is not None:
            return host, self._get_manifest_on(ref, host, target)
        result: tuple[str, Manifest] = self._on_hosts(
            ref, lambda h: (h, self._get_manifest_on(ref, h, target))
        )
        return result

    def _get_manifest_on(self, ref: Reference, host: str, target: str) -> Manifest:
        key = ("manifest", host, ref.name, target)
        if key in self._cache:
            cached: Manifest = self._cache[key]
            return cached
        resp = self._request(
            ref,
            host,
            "GET",
            f"/v2/{ref.path}/manifests/{target}",
            kind="manifest-get",
            accept=ACCEPT_MANIFESTS,
        )
        if resp.status == 404:
            raise self._not_found(ref, host, resp, f"manifest {target!r}")
        if resp.status != 200:
            raise RegistryProtocolError(
                f"{host}: GET manifest {target} of {ref.name} answered HTTP {resp.status}"
            )
        claimed = resp.header("docker-content-digest")
        what = f"manifest {ref.name}@{target} from {host}"
        if target.startswith("sha256:") or ":" in target:
            verify_digest(resp.body, target, what)
            digest = target
        elif claimed:
            validate_digest(claimed)
            verify_digest(resp.body, claimed, what)
            digest = claimed
        else:
            digest = sha256_digest(resp.body)
        try:
            data = json.loads(resp.body)
            if not isinstance(data, dict):
                raise ValueError
        except ValueError:
            raise RegistryProtocolError(
                f"{what} is not a JSON object ({_snippet(resp.body)})",
                hint="a proxy or captive portal may be answering instead of the registry",
            ) from None
        media_type = (
            data.get("mediaType") or (resp.header("content-type") or "").split(";")[0].strip()
        )
        manifest = Manifest(digest=digest, media_type=str(media_type), raw=resp.body, data=data)
        self._cache[key] = manifest
        self._cache[("manifest", host, ref.name, digest)] = manifest
        return manifest

    def get_blob(
        self, ref: Reference, host: str, digest: str, *, max_bytes: int = 8 * 1024 * 1024
    ) -> bytes:
        """A (small) blob such as an image config, verified against its digest."""
        key = ("blob", host, ref.name, digest)
        if key in self._cache:
            cached: bytes = self._cache[key]
            return cached
        validate_digest(digest)
        resp = self._request(ref, host, "GET", f"/v2/{ref.path}/blobs/{digest}", kind="blob")
        redirects = 0
        while resp.status in (301, 302, 303, 307, 308) and redirects < 5:
            location = resp.header("location")
            if not location:
                break
            url = urllib.parse.urljoin(resp.url, location)
            # Storage back-ends get no registry credentials.
            resp = self.transport.send_with_retries("GET", url, {}, "blob")
            redirects += 1
        if resp.status == 404:
            raise self._not_found(ref, host, resp, f"blob {digest}")
        if resp.status != 200:
            raise RegistryProtocolError(
                f"{host}: GET blob {digest} of {ref.name} answered HTTP {resp.status}"
            )
        if len(resp.body) > max_bytes:
            raise RegistryProtocolError(f"{host}: blob {digest} is larger than {max_bytes} bytes")
        verify_digest(resp.body, digest, f"blob {ref.name}@{digest} from {host}")
        self._cache[key] = resp.body
        return resp.body

    def open_blob(
        self,
        ref: Reference,
        host: str,
        digest: str,
        *,
        max_bytes: int = 64 << 30,
        chunk: int = 1 << 20,
        resumes: int = 3,
    ) -> Iterator[bytes]:
        """A (large) blob as chunks, streamed and hashed on the way; the last chunk is
        followed by a :class:`DigestMismatch` check. A dropped connection resumes with a
        ``Range`` request (``resumes`` times). Authentication goes through :meth:`_request`
        (a ``HEAD`` first); redirects to a storage back-end get no registry credentials."""
        import hashlib
        import http.client
        import urllib.error
        import urllib.request

        from rocmenv.errors import DigestMismatch

        validate_digest(digest)
        path = f"/v2/{ref.path}/blobs/{digest}"
        head = self._request(ref, host, "HEAD", path, kind="blob-head")
        if head.status == 404:
            raise self._not_found(ref, host, head, f"blob {digest}")
        url = f"{self.scheme_for(host)}://{host}{path}"
        auth = self._auth_header(host, f"repository:{ref.path}:pull")
        hasher = hashlib.sha256()
        done, failures = 0, 0
        while True:
            request = urllib.request.Request(url)
            for key, value in auth.items():
                request.add_unredirected_header(key, value)
            if done:
                request.add_header("Range", f"bytes={done}-")
            try:
                with urllib.request.urlopen(request, timeout=60) as resp:
                    self.stats.add("blob-stream")
                    if done and resp.status != 206:
                        raise RegistryProtocolError(f"{host}: blob {digest}: Range refused")
                    while True:
                        data = resp.read(chunk)
                        if not data:
                            break
                        done += len(data)
                        if done > max_bytes:
                            raise RegistryProtocolError(
                                f"{host}: blob {digest} is larger than {max_bytes} bytes"
                            )
                        hasher.update(data)
                        yield data
            except (OSError, urllib.error.URLError, http.client.HTTPException) as err:
                failures += 1
                if failures > resumes:
                    raise RegistryUnavailable(
                        f"{host}: reading blob {digest} of {ref.name} failed after "
                        f"{done} bytes: {err}",
                        hint="check the network; the layers read so far are kept",
                    ) from None
                continue
            break
        if f"sha256:{hasher.hexdigest()}" != digest:
            raise DigestMismatch(f"blob {ref.name}@{digest} from {host}: the bytes do not match")

    def resolve_platform(
        self, ref: Reference, *, os_name: str = "linux", arch: str = "amd64"
    ) -> PlatformImage:
        """Follow a tag or digest to its ``linux/amd64`` image, verifying every byte fetched."""
        host, top = self.get_manifest(ref)
        media_type = top.media_type
        if top.is_index:
            entry = pick_platform(top.data, os_name, arch)
            if entry is None:
                available = sorted(
                    {
                        f"{(m.get('platform') or {}).get('os')}/{(m.get('platform') or {}).get('architecture')}"
                        for m in top.data.get("manifests") or []
                        if isinstance(m, dict)
                    }
                )
                from rocmenv.errors import CheckFailed

                raise CheckFailed(
                    f"{ref} has no {os_name}/{arch} image (platforms: {', '.join(available) or 'none'})",
                    hint="pick a tag built for linux/amd64",
                )
            platform_ref = Reference(domain=ref.domain, path=ref.path, digest=entry["digest"])
            _, platform = self.get_manifest(platform_ref, host)
        else:
            platform = top
        if platform.media_type in (DOCKER_SCHEMA1, DOCKER_SCHEMA1_SIGNED):
            arch_found = platform.data.get("architecture")
            config_digest = None
            os_found = os_name
        else:
            config = platform.data.get("config") or {}
            config_digest = config.get("digest") if isinstance(config, dict) else None
            if not isinstance(config_digest, str):
                raise RegistryProtocolError(f"{ref}: image manifest has no config digest")
            if top.is_index:
                os_found, arch_found = os_name, arch  # the index said so
            else:
                blob = self.get_blob(ref, host, config_digest)
                try:
                    cfg = json.loads(blob)
                except ValueError:
                    raise RegistryProtocolError(f"{ref}: image config is not JSON") from None
                os_found, arch_found = cfg.get("os"), cfg.get("architecture")
        if (os_found, arch_found) != (os_name, arch):
            from rocmenv.errors import CheckFailed

            raise CheckFailed(
                f"{ref} is a {os_found}/{arch_found} image, not {os_name}/{arch}",
                hint="pick a tag built for linux/amd64",
            )
        return PlatformImage(
            registry=host,
            digest=top.digest,
            media_type=media_type,
            platform_digest=platform.digest,
            platform_media_type=platform.media_type,
            config_digest=config_digest,
            platform=f"{os_name}/{arch}",
        )

    def image_config(self, ref: Reference, image: PlatformImage) -> dict[str, Any]:
        """The image config JSON (env, labels, …) of a resolved platform image."""
        if image.config_digest is None:
            return {}
        blob = self.get_blob(ref, image.registry, image.config_digest)
        try:
            data = json.loads(blob)
        except ValueError:
            raise RegistryProtocolError(f"{ref}: image config is not JSON") from None
        return data if isinstance(data, dict) else {}


def _next_link(link: str) -> str | None:
    """The path of ``Link: </v2/…?last=x&n=100>; rel="next"``."""
    for part in link.split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", "") or "rel=next" in params.replace(" ", ""):
            url = url.strip().strip("<>")
            split = urllib.parse.urlsplit(url)
            return split.path + (f"?{split.query}" if split.query else "")
    return None


def _snippet(body: bytes) -> str:
    text = body[:60].decode("utf-8", "replace").replace("\n", " ")
    return repr(text) + ("…" if len(body) > 60 else "")
