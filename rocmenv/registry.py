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
import random
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmenv.config import RegistrySettings
from rocmenv.context import Context
from rocmenv.errors import (
    DigestMismatch,
    RegistryAuthError,
    RegistryError,
    RegistryNotFound,
    RegistryProtocolError,
    RegistryUnavailable,
)
from rocmenv.httpclient import Connection, StaleConnection, TransportError
from rocmenv.redact import redact, register_secret
from rocmenv.reference import Reference, is_loopback_host, validate_digest

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_SCHEMA1_SIGNED = "application/vnd.docker.distribution.manifest.v1+prettyjws"
DOCKER_SCHEMA1 = "application/vnd.docker.distribution.manifest.v1+json"
MANIFEST_TYPES: tuple[str, ...] = (
    OCI_INDEX,
    DOCKER_LIST,
    OCI_MANIFEST,
    DOCKER_MANIFEST,
    DOCKER_SCHEMA1_SIGNED,
    DOCKER_SCHEMA1,
)
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
ACCEPT_MANIFESTS = ", ".join(MANIFEST_TYPES)
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 120.0
USER_AGENT = "rocmenv (+https://github.com/rocmenv)"


@dataclass(frozen=True, kw_only=True)
class Response:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    url: str

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True, kw_only=True)
class ManifestHead:
    digest: str
    media_type: str
    size: int | None


@dataclass(frozen=True, kw_only=True)
class Manifest:
    digest: str
    media_type: str
    raw: bytes
    data: dict[str, Any]

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES


@dataclass(frozen=True, kw_only=True)
class PlatformImage:
    """A tag or digest followed down to its ``linux/amd64`` image."""

    registry: str  # the host that answered (a mirror or the registry itself)
    digest: str  # what the tag points at (an index digest for multi-platform images)
    media_type: str
    platform_digest: str  # the linux/amd64 image manifest
    platform_media_type: str
    config_digest: str | None
    platform: str = "linux/amd64"


@dataclass
class RegistryStats:
    """HTTP round trips made, by kind (``tags``, ``manifest-head``, ``token``, …)."""

    by_kind: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str) -> None:
        with self._lock:
            self.by_kind[kind] += 1

    @property
    def requests(self) -> int:
        return sum(self.by_kind.values())


@dataclass(frozen=True, kw_only=True)
class _Challenge:
    scheme: str  # "bearer" | "basic"
    params: dict[str, str]


def parse_challenge(value: str) -> _Challenge | None:
    """``Bearer realm="https://…",service="…",scope="…"`` → scheme and parameters."""
    scheme, _, rest = value.strip().partition(" ")
    params: dict[str, str] = {}
    i = 0
    while i < len(rest):
        while i < len(rest) and rest[i] in " ,":
            i += 1
        eq = rest.find("=", i)
        if eq == -1:
            break
        key = rest[i:eq].strip().lower()
        i = eq + 1
        if i < len(rest) and rest[i] == '"':
            end = i + 1
            chars: list[str] = []
            while end < len(rest) and rest[end] != '"':
                if rest[end] == "\\" and end + 1 < len(rest):
                    end += 1
                chars.append(rest[end])
                end += 1
            params[key] = "".join(chars)
            i = end + 1
        else:
            end = rest.find(",", i)
            end = len(rest) if end == -1 else end
            params[key] = rest[i:end].strip()
            i = end
    if not scheme:
        return None
    return _Challenge(scheme=scheme.lower(), params=params)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    import email.utils  # only for the rare HTTP-date form

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def sha256_digest(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def verify_digest(data: bytes, digest: str, what: str) -> None:
    import hashlib

    algorithm, _, expected = digest.partition(":")
    try:
        actual = hashlib.new(algorithm, data).hexdigest()
    except ValueError:
        raise RegistryProtocolError(f"{what}: unsupported digest algorithm {algorithm!r}") from None
    if actual != expected:
        raise DigestMismatch(
            f"{what}: the bytes received hash to {algorithm}:{actual}, not the {digest} claimed",
            hint="the registry, a mirror or a proxy on the way served corrupt or tampered data; "
            "retry, or check the mirror configuration",
        )


class _Connections:
    """Keep-alive connections, one per (thread, scheme, host)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._local = threading.local()
        self._ssl: Any = None

    def _pool(self) -> dict[tuple[str, str], Connection]:
        pool: dict[tuple[str, str], Connection] = self._local.__dict__.setdefault("pool", {})
        return pool

    def get(self, scheme: str, host: str) -> Connection:
        pool = self._pool()
        conn = pool.get((scheme, host))
        if conn is None:
            if scheme == "https" and self._ssl is None:
                import ssl  # only for HTTPS registries: ~5 ms

                self._ssl = ssl.create_default_context()
            conn = Connection(scheme, host, self.timeout, self._ssl)
            pool[(scheme, host)] = conn
        return conn

    def close(self) -> None:
        pool = self._pool()
        for conn in pool.values():
            conn.close()
        pool.clear()


class _Transient(Exception):
    """A failure worth retrying (connection trouble, timeouts, truncation)."""


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
        self.stats = RegistryStats()
        self._sleep = sleep
        self._conns = _Connections(self.settings.timeout)
        self._tokens: dict[tuple[str, str], str] = {}
        self._basic: dict[str, str] = {}  # host -> "Basic …" for registries that asked for it
        self._creds: dict[str, tuple[str, str] | None] = {}
        self._cache: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()
        backoff = ctx.env.get("ROCMENV_REGISTRY_BACKOFF")
        self._backoff = float(backoff) if backoff else 0.5

    def close(self) -> None:
        self._conns.close()

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
        if is_loopback_host(host) or host in self.settings.insecure:
            return "http"
        return "https"

    # -- low level --------------------------------------------------------------------------

    def _send(self, method: str, url: str, headers: Mapping[str, str], kind: str) -> Response:
        parts = urllib.parse.urlsplit(url)
        host = parts.netloc
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn = self._conns.get(parts.scheme, host)
        self.stats.add(kind)
        full = {"User-Agent": USER_AGENT, **headers}
        try:
            try:
                status, hdrs, body = conn.request(method, path, full)
            except StaleConnection:
                # The server closed an idle keep-alive connection: reconnect once, at no cost.
                status, hdrs, body = conn.request(method, path, full)
        except TransportError as err:
            raise _Transient(f"{host}: {err}") from err
        return Response(status=status, headers=hdrs, body=body, url=url)

    def _send_with_retries(
        self, method: str, url: str, headers: Mapping[str, str], kind: str
    ) -> Response:
        attempts = self.settings.retries + 1
        last = ""
        for attempt in range(attempts):
            try:
                resp = self._send(method, url, headers, kind)
            except _Transient as err:
                last = str(err)
                wait = None
            else:
                if resp.status not in RETRY_STATUSES:
                    return resp
                last = f"HTTP {resp.status} from {urllib.parse.urlsplit(url).netloc}"
                wait = _retry_after(resp.header("retry-after"))
                if wait is not None and wait > MAX_RETRY_AFTER:
                    raise RegistryUnavailable(
                        f"{redact(url)}: rate limited (HTTP {resp.status}); the registry asks to "
                        f"wait {wait:.0f} s",
                        hint="try again later, authenticate (`docker login`) for higher limits, "
                        "or configure a mirror",
                    )
                if attempt == attempts - 1:
                    if resp.status == 429:
                        raise RegistryUnavailable(
                            f"{redact(url)}: still rate limited (HTTP 429) after {attempts} attempts",
                            hint="try again later, authenticate (`docker login`) for higher "
                            "limits, or configure a mirror ([registry] mirrors)",
                        )
                    return resp
            if attempt == attempts - 1:
                break
            if wait is None:
                wait = min(30.0, self._backoff * (2**attempt)) * (0.5 + random.random() / 2)
            self._sleep(wait)
        raise RegistryUnavailable(
            f"{method} {redact(url)} failed after {attempts} attempts: {last}",
            hint="check that the registry is up and reachable (network, proxy, firewall); "
            "set [registry] timeout/retries or ROCMENV_REGISTRY_TIMEOUT to adjust",
        )

    # -- auth -------------------------------------------------------------------------------

    def _credentials(self, host: str, registry_name: str) -> tuple[str, str] | None:
        """Username and password (or identity token) for ``host`` from the Docker config."""
        with self._lock:
            if host in self._creds:
                return self._creds[host]
        creds = self._load_credentials(host, registry_name)
        with self._lock:
            self._creds[host] = creds
        return creds

    def _load_credentials(self, host: str, registry_name: str) -> tuple[str, str] | None:
        config_dir = self.ctx.env.get("DOCKER_CONFIG")
        if config_dir:
            path = Path(config_dir) / "config.json"
        else:
            home = self.ctx.env.get("HOME") or str(Path.home())
            path = Path(home) / ".docker" / "config.json"
        if not path.is_file():
            return None
        try:
            from docker import auth as docker_auth
        except ImportError:  # pragma: no cover - docker is a dependency
            return None
        try:
            authconfig = docker_auth.load_config(
                config_path=str(path), credstore_env=dict(self.ctx.env)
            )
            for name in dict.fromkeys((registry_name, host)):
                entry = docker_auth.resolve_authconfig(authconfig, registry=name)
                if entry:
                    break
        except Exception as err:  # docker-py raises several kinds for broken helpers/configs
            raise RegistryAuthError(
                f"cannot read credentials for {host} from {path}: {redact(str(err))}",
                hint="fix the Docker config (or its credential helper), or run `docker login`",
            ) from err
        if not entry:
            return None
        username = entry.get("Username") or entry.get("username")
        password = entry.get("Password") or entry.get("password")
        token = entry.get("IdentityToken") or entry.get("identitytoken")
        register_secret(password)
        register_secret(token)
        if token:
            return ("<token>", str(token))
        if username and password:
            return (str(username), str(password))
        return None

    def _auth_header(self, host: str, scope: str) -> dict[str, str]:
        with self._lock:
            token = self._tokens.get((host, scope))
            basic = self._basic.get(host)
        if token:
            return {"Authorization": f"Bearer {token}"}
        if basic:
            return {"Authorization": basic}
        return {}

    def _authenticate(
        self, host: str, registry_name: str, scope: str, challenge_value: str
    ) -> None:
        challenge = parse_challenge(challenge_value)
        if challenge is None:
            raise RegistryProtocolError(f"{host} answered 401 with an unreadable challenge")
        creds = self._credentials(host, registry_name)
        if challenge.scheme == "basic":
            if creds is None:
                raise RegistryAuthError(
                    f"{host} requires credentials and none are configured",
                    hint=f"run `docker login {host}` (or set DOCKER_CONFIG to a config with them)",
                )
            import base64

            value = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            register_secret(value.split(" ", 1)[1])
            with self._lock:
                self._basic[host] = value
            return
        if challenge.scheme != "bearer" or "realm" not in challenge.params:
            raise RegistryProtocolError(
                f"{host} asked for an unsupported authentication scheme {challenge.scheme!r}"
            )
        realm = challenge.params["realm"]
        realm_parts = urllib.parse.urlsplit(realm)
        if realm_parts.scheme not in ("http", "https") or not realm_parts.netloc:
            raise RegistryProtocolError(f"{host} gave an invalid token realm {realm!r}")
        if realm_parts.scheme == "http" and self.scheme_for(realm_parts.netloc) != "http":
            raise RegistryAuthError(
                f"{host} sends us to a token server over plain HTTP ({realm})",
                hint="refusing to send credentials unencrypted; list it under [registry] insecure "
                "if this is intended",
            )
        query = [("service", challenge.params.get("service", host))]
        want_scope = challenge.params.get("scope") or scope
        if want_scope:
            query.append(("scope", want_scope))
        if creds is not None and creds[0] != "<token>":
            query.append(("account", creds[0]))
        url = realm + ("&" if realm_parts.query else "?") + urllib.parse.urlencode(query)
        headers: dict[str, str] = {}
        if creds is not None and creds[0] != "<token>":
            import base64

            encoded = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            register_secret(encoded)
            headers["Authorization"] = f"Basic {encoded}"
        resp = self._send_with_retries("GET", url, headers, "token")
        if resp.status in (401, 403):
            who = f"user {creds[0]!r}" if creds else "anonymous access"
            raise RegistryAuthError(
                f"the token server {realm_parts.netloc} refused {who} for {want_scope or host} "
                f"(HTTP {resp.status})",
                hint=f"check the credentials for {host} (`docker login {host}`)"
                if creds
                else f"this repository needs credentials: run `docker login {host}`",
            )
        if resp.status != 200:
            raise RegistryProtocolError(
                f"the token server {realm_parts.netloc} answered HTTP {resp.status}",
                hint="retry later; if it persists the registry's auth service is down",
            )
        try:
            payload = json.loads(resp.body)
            token = payload.get("token") or payload.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryProtocolError(f"the token server {realm_parts.netloc} sent no token")
        register_secret(token)
        with self._lock:
            self._tokens[(host, scope)] = token

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
        resp = self._send_with_retries(
            method, url, {**headers, **self._auth_header(host, scope)}, kind
        )
        if resp.status == 401:
            challenge = resp.header("www-authenticate")
            if not challenge:
                raise RegistryAuthError(
                    f"{host} refused {method} {path} (HTTP 401) without a challenge"
                )
            had_auth = bool(self._auth_header(host, scope))
            if had_auth:
                with self._lock:
                    self._tokens.pop((host, scope), None)
            self._authenticate(host, ref.domain, scope, challenge)
            resp = self._send_with_retries(
                method, url, {**headers, **self._auth_header(host, scope)}, kind
            )
            if resp.status == 401:
                creds = self._creds.get(host)
                raise RegistryAuthError(
                    f"{host} refused access to {ref.name} (HTTP 401)"
                    + (f" for user {creds[0]!r}" if creds else " without credentials"),
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
            resp = self._send_with_retries("GET", url, {}, "blob")
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

    def resolve_platform(
        self, ref: Reference, *, os_name: str = "linux", arch: str = "amd64"
    ) -> PlatformImage:
        """Follow a tag or digest to its ``linux/amd64`` image, verifying every byte fetched."""
        host, top = self.get_manifest(ref)
        media_type = top.media_type
        if top.is_index:
            entry = _pick_platform(top.data, os_name, arch)
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


def _pick_platform(index: Mapping[str, Any], os_name: str, arch: str) -> dict[str, Any] | None:
    """The index entry for ``os_name/arch``; a plain entry is preferred over a variant one."""
    matches = [
        entry
        for entry in index.get("manifests") or []
        if isinstance(entry, dict)
        and isinstance(entry.get("digest"), str)
        and (entry.get("platform") or {}).get("os") == os_name
        and (entry.get("platform") or {}).get("architecture") == arch
    ]
    matches.sort(key=lambda entry: bool((entry.get("platform") or {}).get("variant")))
    return matches[0] if matches else None


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
