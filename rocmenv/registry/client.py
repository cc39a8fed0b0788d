"""OCI Distribution API v2 client: tags, manifest digests, platform manifests, blobs.

- Transport (urllib3, TLS trust, proxies, size caps, deadlines, retries):
  :mod:`rocmenv.registry.transport`; schemes: HTTPS, plain HTTP only for loopback registries
  without certs.d, ``insecure`` as Docker has it (unverified HTTPS, then HTTP).
- Auth (:mod:`rocmenv.registry.auth`): bearer tokens from the ``WWW-Authenticate`` challenge,
  credentials per host contacted, anonymous tokens cached between commands (CLI clients).
  A 401 after an anonymous token is Docker Hub's "not found, or private".
- Tag listing (:mod:`rocmenv.registry.tag_list`): relative or absolute ``Link`` pages on the
  same host, at most ``max-pages``; ``page_size`` (1 to 1000) sets ``n=``.
- ``HEAD`` for digests (no Docker Hub pull counted), with every manifest and index media type
  in ``Accept``; manifest and blob bytes are hashed and compared with the digest claimed;
  digests from the registry must be sha256/384/512.
- Mirrors: tried in order before the registry itself; any error falls through to the next
  (:attr:`RegistryClient.mirror_failures` says which and why).
- Every HTTP round trip is counted (:attr:`RegistryClient.stats`), ``ratelimit-*`` headers
  kept (:meth:`RegistryClient.ratelimits`); what was fetched once in a client's life is not
  fetched again.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rocmenv.context import Context
from rocmenv.errors import (
    RegistryAuthError,
    RegistryError,
    RegistryNotFound,
    RegistryProtocolError,
)
from rocmenv.grammar.reference import Reference, validate_digest
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
from rocmenv.registry.response import Response
from rocmenv.registry.transport import Transport
from rocmenv.settings.registry import RegistrySettings

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
        token_cache: bool = False,
    ) -> None:
        self.ctx = ctx
        self.settings = settings or RegistrySettings()
        self.transport = Transport(self.settings, ctx.env, sleep)
        self.stats = self.transport.stats
        self.token_cache = token_cache
        self.mirror_failures: list[str] = []  # "mirror: why", for the user
        self._auth: RegistryAuth | None = None
        self._cache: dict[tuple[str, ...], Any] = {}

    @property
    def auth(self) -> RegistryAuth:
        if self._auth is None:
            from rocmenv.registry.auth import RegistryAuth

            cache, challenges = None, None
            if self.token_cache:
                from rocmenv.registry.challenge_cache import ChallengeCache, challenge_path
                from rocmenv.registry.token_cache import TokenCache, cache_path

                path = cache_path(self.ctx.env)
                if path is not None:
                    cache = TokenCache(path, within=self.ctx.checkout)
                    challenges = ChallengeCache(challenge_path(path), within=self.ctx.checkout)
            self._auth = RegistryAuth(self.ctx, self.transport, cache, challenges)
        return self._auth

    def ratelimits(self) -> list[dict[str, Any]]:
        """The last ``ratelimit-*`` values seen, per registry host (Docker Hub sends them)."""
        return [v.as_json() for _, v in sorted(self.transport.ratelimits.items())]

    def ratelimit_warnings(self) -> list[str]:
        """One line per host whose ``ratelimit-remaining`` is under the configured threshold."""
        out = []
        for host, limit in sorted(self.transport.ratelimits.items()):
            if limit.remaining is not None and limit.remaining < self.settings.ratelimit_warning:
                window = f" per {limit.window // 3600} h" if limit.window else ""
                out.append(
                    f"{host}: only {limit.remaining} pulls left of {limit.limit}{window} "
                    "(ratelimit-remaining); `docker login` raises the limit, a mirror spares it"
                )
        return out

    def auth_header(self, host: str, scope: str) -> dict[str, str]:
        if self._auth is None and not self.token_cache:
            return {}  # open registries never load the auth module
        return self.auth.header(host, scope)

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

    def request(
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
        scheme = self.scheme_for(host)
        url = f"{scheme}://{host}{path}"
        headers = {"Accept": accept} if accept else {}
        credential = self.auth_header(host, scope)
        if not credential and self.token_cache:
            # no token yet: the realm this host sent us to last time is asked now, while
            # this request (and its 401, whose challenge decides) is on its way
            realm = self.auth.fetch_ahead(host, scope)
            if realm is not None:
                self.transport.dial_ahead(realm, host)
                self.transport.dial_ahead(url, host)
        resp = self.transport.send_with_retries(
            method, url, {**headers, **credential}, kind, registry_host=host
        )
        if resp.status == 401:
            challenge = resp.header("www-authenticate")
            if not challenge:
                raise RegistryAuthError(
                    f"{host} refused {method} {path} (HTTP 401) without a challenge"
                )
            if self.auth_header(host, scope):
                self.auth.forget(host, scope)  # expired or revoked: ask for a new one
            self.auth.authenticate(host, scope, challenge, self.scheme_for(host))
            url = f"{self.scheme_for(host)}://{host}{path}"
            resp = self.transport.send_with_retries(
                method, url, {**headers, **self.auth_header(host, scope)}, kind, registry_host=host
            )
            if resp.status == 401:
                user = self.auth.user_for(host)
                if user is None:
                    # Docker Hub grants an anonymous token for any name, then refuses it.
                    raise RegistryNotFound(
                        f"{host}: repository {ref.path} not found, or private: check the name, "
                        "or log in",
                        hint=f"check the spelling of {ref.familiar_name}; if it is private, run "
                        f"`docker login {host}`",
                    )
                raise RegistryAuthError(
                    f"{host} refused access to {ref.name} (HTTP 401) for user {user!r}",
                    hint=f"check `docker login {host}` and that the account can pull {ref.path}",
                )
        if resp.status == 403:
            raise RegistryAuthError(
                f"{host} denied access to {ref.name} (HTTP 403)",
                hint="the account lacks permission for this repository",
            )
        return resp

    def on_hosts(self, ref: Reference, call: Callable[[str], Any]) -> Any:
        """Run ``call(host)`` on the mirrors then the registry; first success wins.

        As Docker does: any error from a mirror falls through to the next mirror and then the
        registry itself, and :attr:`mirror_failures` says which mirror failed and why.
        """
        hosts = self.hosts_for(ref)
        upstream = hosts[-1]
        for host in hosts[:-1]:
            try:
                return call(host)
            except RegistryError as err:
                why = err.what + (f" — {err.hint}" if err.hint else "")
                self.mirror_failures.append(f"mirror {host} failed for {ref.name}: {why}")
        try:
            return call(upstream)
        except RegistryError as err:
            if len(hosts) > 1:
                tried = "; ".join(self.mirror_failures[-(len(hosts) - 1) :])
                err.what = f"{err.what} (after the mirrors: {tried})"
            raise

    # -- API --------------------------------------------------------------------------------

    def not_found(self, ref: Reference, host: str, resp: Response, what: str) -> RegistryNotFound:
        # pragma: code is only compared with NAME_UNKNOWN: any other start value reads the same
        code = ""  # pragma: no mutate
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

    def list_tags(self, ref: Reference, page_size: int | None = None) -> list[str]:
        key = ("tags", ref.name, str(page_size))
        if key in self._cache:
            return list(self._cache[key])
        tags: list[str] = []
        from rocmenv.registry.tag_list import tag_pages

        for page in tag_pages(self, ref, page_size):
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
            resp = self.request(
                ref,
                host,
                "HEAD",
                f"/v2/{ref.path}/manifests/{target}",
                kind="manifest-head",
                accept=ACCEPT_MANIFESTS,
            )
            if resp.status == 404:
                raise self.not_found(ref, host, resp, f"manifest {target!r}")
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
            _registry_digest(digest, f"{host}: the digest of {ref.name}:{target}")
            return host, ManifestHead(
                digest=digest,
                media_type=media_type,
                size=int(size) if size and size.isdigit() else None,
            )

        result: tuple[str, ManifestHead] = self.on_hosts(ref, call)
        self._cache[key] = result
        return result

    def get_manifest(self, ref: Reference, host: str | None = None) -> tuple[str, Manifest]:
        """The manifest bytes, verified against the digest (requested or claimed)."""
        target = ref.digest or ref.tag or "latest"
        if host is not None:
            return host, self._get_manifest_on(ref, host, target)
        result: tuple[str, Manifest] = self.on_hosts(
            ref, lambda h: (h, self._get_manifest_on(ref, h, target))
        )
        return result

    def _get_manifest_on(self, ref: Reference, host: str, target: str) -> Manifest:
        key = ("manifest", host, ref.name, target)
        if key in self._cache:
            cached: Manifest = self._cache[key]
            return cached
        resp = self.request(
            ref,
            host,
            "GET",
            f"/v2/{ref.path}/manifests/{target}",
            kind="manifest-get",
            accept=ACCEPT_MANIFESTS,
        )
        if resp.status == 404:
            raise self.not_found(ref, host, resp, f"manifest {target!r}")
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
            _registry_digest(claimed, f"{what}: Docker-Content-Digest")
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
        resp = self.request(ref, host, "GET", f"/v2/{ref.path}/blobs/{digest}", kind="blob")
        redirects = 0
        while resp.status in (301, 302, 303, 307, 308) and redirects < 5:
            location = resp.header("location")
            if not location:
                break
            url = urllib.parse.urljoin(resp.url, location)
            # Storage back-ends get no registry credentials.
            resp = self.transport.send_with_retries("GET", url, {}, "blob", registry_host=host)
            redirects += 1
        if resp.status == 404:
            raise self.not_found(ref, host, resp, f"blob {digest}")
        if resp.status != 200:
            raise RegistryProtocolError(
                f"{host}: GET blob {digest} of {ref.name} answered HTTP {resp.status}"
            )
        if len(resp.body) > max_bytes:
            raise RegistryProtocolError(f"{host}: blob {digest} is larger than {max_bytes} bytes")
        verify_digest(resp.body, digest, f"blob {ref.name}@{digest} from {host}")
        self._cache[key] = resp.body
        return resp.body

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
            _registry_digest(entry["digest"], f"{ref}: the {os_name}/{arch} entry of the index")
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
            _registry_digest(config_digest, f"{ref}: the config digest of the image manifest")
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


def _registry_digest(value: str, what: str) -> str:
    """A digest the registry sent: sha256/384/512 in canonical form, else a protocol error."""
    from rocmenv.grammar.reference import digest_problem

    problem = digest_problem(value)
    if problem is not None:
        raise RegistryProtocolError(
            f"{what} is not a valid digest: {problem.detail}",
            hint="the registry or a mirror sent a malformed or unsupported digest "
            "(only sha256, sha384 and sha512 are accepted); nothing was written",
        )
    return value


def _snippet(body: bytes) -> str:
    text = body[:60].decode("utf-8", "replace").replace("\n", " ")
    return repr(text) + ("…" if len(body) > 60 else "")
