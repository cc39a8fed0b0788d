"""Registry authentication: challenges, bearer tokens, Basic auth.

Logins come from where podman, skopeo and Docker keep them, and from Docker credential
helpers (:mod:`rocmenv.registry.credentials`, the standard library only), looked up by the
host actually contacted (a mirror never gets Docker Hub's; an auth.json login for one
namespace is not widened to its host), once per host and command. They are sent only over
HTTPS or to loopback, follow a token realm only on the registry's own host name (or
``auth.docker.io`` for Docker Hub), and an ``IdentityToken`` is used as an OAuth2
refresh-token grant. A token service's 401/429 is not retried with the same credentials.
Anonymous tokens may come from, and go to, :mod:`rocmenv.registry.token_cache`. Every secret
handled is registered with :mod:`rocmenv.redact`, so it never appears in a message.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from typing import TYPE_CHECKING

from rocmenv.context import Context
from rocmenv.errors import RegistryAuthError, RegistryProtocolError
from rocmenv.grammar.reference import is_loopback_host
from rocmenv.record import record
from rocmenv.redact import register_secret
from rocmenv.registry.credentials import HUB_HOSTS, IDENTITY_TOKEN
from rocmenv.registry.response import Response
from rocmenv.registry.transport import Transport

if TYPE_CHECKING:
    from rocmenv.registry.challenge_cache import AskAhead, ChallengeCache
    from rocmenv.registry.token_cache import TokenCache


@record
class _Challenge:
    scheme: str  # "bearer" | "basic"
    params: dict[str, str]


def parse_challenge(value: str) -> _Challenge | None:
    """``Bearer realm="https://…",service="…",scope="…"`` → scheme and parameters."""
    scheme, _, rest = value.strip().partition(" ")
    params: dict[str, str] = {}
    i = 0
    # pragma: "<=" is equivalent: at len(rest) find() gives -1 and the loop breaks
    while i < len(rest):  # pragma: no mutate
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


class RegistryAuth:
    """Tokens per (host, scope), Basic headers per host, credentials per host; thread-safe."""

    def __init__(
        self,
        ctx: Context,
        transport: Transport,
        cache: TokenCache | None = None,
        challenges: ChallengeCache | None = None,
    ) -> None:
        self.ctx = ctx
        self.transport = transport
        self.cache = cache  # anonymous tokens only
        self.challenges = challenges  # realm and service per host, answered anonymously
        self._ahead: dict[tuple[str, str, str], AskAhead] = {}  # token requests under way
        self._skip_cache: set[tuple[str, str]] = set()
        self._tokens: dict[tuple[str, str], str] = {}
        self._basic: dict[str, str] = {}  # host -> "Basic …" for registries that asked for it
        self._creds: dict[str, tuple[str, str] | None] = {}
        self._lock = threading.Lock()

    def user_for(self, host: str) -> str | None:
        creds = self._creds.get(host)
        return creds[0] if creds else None

    def forget(self, host: str, scope: str) -> None:
        """The token for ``(host, scope)`` was refused: ask the realm, not the cache, next."""
        with self._lock:
            self._tokens.pop((host, scope), None)
            self._skip_cache.add((host, scope))

    def _credentials(self, host: str) -> tuple[str, str] | None:
        """Username and password (or ``("<token>", identity token)``) for the host contacted.

        Looked up by ``host`` only — a mirror of Docker Hub never gets the Hub's credentials
        unless the Docker config has an entry for the mirror itself.
        """
        with self._lock:
            if host in self._creds:
                return self._creds[host]
        creds = self._load_credentials(host)
        with self._lock:
            self._creds[host] = creds
        return creds

    def _load_credentials(self, host: str) -> tuple[str, str] | None:
        """The first login for ``host`` (:func:`~rocmenv.registry.credentials.find_login`);
        a credential helper gets what is left of the command's deadline, at most a minute."""
        from rocmenv.registry.credentials import HELPER_TIMEOUT, find_login

        timeout = max(1.0, min(HELPER_TIMEOUT, self.transport.deadline_left()))
        return find_login(host, self.ctx.env, timeout=timeout)

    def header(self, host: str, scope: str) -> dict[str, str]:
        with self._lock:
            token = self._tokens.get((host, scope))
            basic = self._basic.get(host)
            fresh = (host, scope) in self._skip_cache
        remembered = self.challenges.get(host) if self.challenges is not None else None
        if token is None and basic is None and self.cache is not None and remembered and not fresh:
            # an anonymous token cached for this host's realm: sent with the first request,
            # sparing the 401 round trip (a refused one is forgotten and asked for anew)
            token = self.cache.get((*remembered, scope))
            if token is not None:
                with self._lock:
                    self._tokens[(host, scope)] = token
        if token:
            return {"Authorization": f"Bearer {token}"}
        if basic:
            return {"Authorization": basic}
        return {}

    def fetch_ahead(self, host: str, scope: str) -> str | None:
        """Ask the realm ``host`` sent us to last time for an anonymous ``scope`` token now,
        on a thread, while the first request is on its way; returns the realm's URL, or None
        when nothing was started. The remembered realm is checked as a fresh challenge's;
        hosts with credentials never use it; the token is taken only by :meth:`authenticate`
        for a 401 naming the same realm, service and scope
        (:mod:`rocmenv.registry.challenge_cache`)."""
        remembered = self.challenges.get(host) if self.challenges is not None else None
        if remembered is None:
            return None
        realm, service = remembered
        key = (realm, service, scope)
        with self._lock:
            if (host, scope) in self._tokens or host in self._basic or key in self._ahead:
                return None
            if (host, scope) in self._skip_cache:
                return None
        if self._credentials(host) is not None:
            return None  # credentials never follow a remembered challenge
        try:
            realm_parts = self._checked_realm(host, realm)
        except (RegistryAuthError, RegistryProtocolError):
            assert self.challenges is not None
            self.challenges.drop(host)
            return None
        from rocmenv.registry.challenge_cache import AskAhead

        ahead = AskAhead(
            lambda: self._token_request(realm, realm_parts, service, scope, None, host)
        )
        with self._lock:
            if key in self._ahead:
                return None
            self._ahead[key] = ahead
        ahead.start()
        return realm

    def _checked_realm(self, host: str, realm: str) -> urllib.parse.SplitResult:
        """``realm`` split, if ``host`` may send us there: HTTP(S) with a host name, plain
        HTTP only to loopback or for an insecure registry."""
        realm_parts = urllib.parse.urlsplit(realm)
        if realm_parts.scheme not in ("http", "https") or not realm_parts.hostname:
            raise RegistryProtocolError(f"{host} gave an invalid token realm {realm!r}")
        if realm_parts.scheme == "http" and not (
            is_loopback_host(realm_parts.netloc) or self.transport.is_insecure(host)
        ):
            raise RegistryAuthError(
                f"{host} sends us to a token server over plain HTTP ({realm})",
                hint="refusing to talk to a token server unencrypted; list the registry under "
                "[registry] insecure if this is intended",
            )
        return realm_parts

    def authenticate(self, host: str, scope: str, challenge_value: str, scheme: str) -> None:
        """Answer ``host``'s challenge; ``scheme`` is how ``host`` itself is spoken to."""
        challenge = parse_challenge(challenge_value)
        if challenge is None:
            raise RegistryProtocolError(f"{host} answered 401 with an unreadable challenge")
        creds = self._credentials(host)
        if creds is not None and scheme != "https" and not is_loopback_host(host):
            raise RegistryAuthError(
                f"{host} asks for credentials over plain HTTP; refusing to send them in cleartext",
                hint="serve the registry over HTTPS (credentials travel in cleartext only to "
                "loopback registries)",
            )
        if challenge.scheme == "basic":
            self._answer_basic(host, creds)
            return
        if challenge.scheme != "bearer" or "realm" not in challenge.params:
            raise RegistryProtocolError(
                f"{host} asked for an unsupported authentication scheme {challenge.scheme!r}"
            )
        realm = challenge.params["realm"]
        realm_parts = self._checked_realm(host, realm)
        realm_host = realm_parts.netloc
        # Credentials follow the realm only to the credential's own host, and never in
        # cleartext off loopback; otherwise the token is asked for anonymously.
        # pragma: "" is as falsy as None, and withheld is only read when it is true
        withheld = None  # pragma: no mutate
        if creds is not None:
            withheld = _withheld_reason(host, realm_parts)
            if withheld:
                creds = None
        service = challenge.params.get("service", host)
        want_scope = challenge.params.get("scope") or scope
        key = (realm, service, want_scope)
        with self._lock:
            fresh = (host, scope) in self._skip_cache
            ahead = self._ahead.pop(key, None)
        if creds is None and not fresh:
            cached = self.cache.get(key) if self.cache is not None else None
            if cached is not None:
                with self._lock:
                    self._tokens[(host, scope)] = cached
                return
        # a token asked for ahead from the remembered realm: this challenge names the same
        # realm, service and scope, so it is the answer this request would get now
        early = ahead.result(self.transport.deadline_left()) if ahead and creds is None else None
        resp = early or self._token_request(realm, realm_parts, service, want_scope, creds, host)
        token, expires_in = _token_of(resp, host, realm_host, want_scope, creds, withheld)
        register_secret(token)
        with self._lock:
            self._tokens[(host, scope)] = token
        if creds is None and self.cache is not None:
            lifetime = expires_in if isinstance(expires_in, int) and expires_in > 0 else 60
            self.cache.put(key, token, lifetime)
        if creds is None and self.challenges is not None:
            self.challenges.put(host, realm, service)

    def _answer_basic(self, host: str, creds: tuple[str, str] | None) -> None:
        """Answer a Basic challenge with ``host``'s login (an identity token will not do)."""
        if creds is None or creds[0] == IDENTITY_TOKEN:
            raise RegistryAuthError(
                f"{host} requires credentials and none are configured",
                hint=f"run `docker login {host}` or `podman login {host}` (or set "
                "DOCKER_CONFIG / REGISTRY_AUTH_FILE to a file with them)",
            )
        value = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        register_secret(value.split(" ", 1)[1])
        with self._lock:
            self._basic[host] = value

    def _token_request(
        self,
        realm: str,
        realm_parts: urllib.parse.SplitResult,
        service: str,
        scope: str,
        creds: tuple[str, str] | None,
        host: str,
    ) -> Response:
        """The token server's answer for ``scope`` (``creds``: already vetted for the realm)."""
        if creds is not None and creds[0] == IDENTITY_TOKEN:
            return self._refresh_token_grant(realm, service, scope, creds[1], host)
        query = [("service", service)]
        if scope:
            query.append(("scope", scope))
        if creds is not None:
            query.append(("account", creds[0]))
        url = realm + ("&" if realm_parts.query else "?") + urllib.parse.urlencode(query)
        headers: dict[str, str] = {}
        if creds is not None:
            encoded = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            register_secret(encoded)
            headers["Authorization"] = f"Basic {encoded}"
        # with credentials, a 429 ("too many failed logins") is not retried with them
        return self.transport.send_with_retries(
            "GET",
            url,
            headers,
            "token",
            registry_host=host,
            no_retry=(429,) if creds is not None else (),
        )

    def _refresh_token_grant(
        self, realm: str, service: str, scope: str, refresh_token: str, host: str
    ) -> Response:
        """Docker's use of an ``IdentityToken``: OAuth2 ``grant_type=refresh_token`` POST."""
        form = [
            ("grant_type", "refresh_token"),
            ("service", service),
            ("client_id", "rocmenv"),
            ("refresh_token", refresh_token),
        ]
        if scope:
            form.append(("scope", scope))
        return self.transport.send_with_retries(
            "POST",
            realm,
            {"Content-Type": "application/x-www-form-urlencoded"},
            "token",
            registry_host=host,
            no_retry=(429,),
            body=urllib.parse.urlencode(form).encode(),
        )


def _same_owner(registry_host: str, realm_hostname: str) -> bool:
    """Whether a token realm on ``realm_hostname`` may receive ``registry_host``'s credentials:
    the same host name (any port), or Docker Hub's own token service for Docker Hub."""
    from rocmenv.grammar.reference import host_of

    registry_name = host_of(registry_host).lower()
    realm_hostname = realm_hostname.lower()
    if registry_name == realm_hostname:
        return True
    return registry_name in HUB_HOSTS and realm_hostname == "auth.docker.io"


def _withheld_reason(host: str, realm_parts: urllib.parse.SplitResult) -> str | None:
    """Why ``host``'s credentials must not follow its token realm, or None if they may."""
    realm_host = realm_parts.netloc
    if not _same_owner(host, realm_parts.hostname or ""):
        return f"the token server {realm_host} is not {host}'s own host"
    if realm_parts.scheme == "http" and not is_loopback_host(realm_host):
        return f"the token server {realm_host} is not on HTTPS"
    return None


def _token_of(
    resp: Response,
    host: str,
    realm_host: str,
    want_scope: str,
    creds: tuple[str, str] | None,
    withheld: str | None,
) -> tuple[str, object]:
    """The token and its ``expires_in`` from the token server's answer, or the error that
    says who was refused (and why credentials were withheld)."""
    if resp.status in (401, 403) or (resp.status == 429 and creds is not None):
        who = (
            "the identity token"
            if creds and creds[0] == IDENTITY_TOKEN
            else f"user {creds[0]!r}"
            if creds
            else "anonymous access"
        )
        raise RegistryAuthError(
            f"the token server {realm_host} refused {who} for {want_scope or host} "
            f"(HTTP {resp.status})" + (" — too many attempts" if resp.status == 429 else ""),
            hint=f"check the credentials for {host} (`docker login {host}`); they are not retried"
            if creds
            else f"this repository needs credentials: run `docker login {host}`"
            + (f" ({withheld}, so credentials were not sent)" if withheld else ""),
        )
    if resp.status != 200:
        raise RegistryProtocolError(
            f"the token server {realm_host} answered HTTP {resp.status}",
            hint="retry later; if it persists the registry's auth service is down",
        )
    try:
        payload = json.loads(resp.body)
        token = payload.get("token") or payload.get("access_token")
        expires_in = payload.get("expires_in")
    except (ValueError, AttributeError):
        token, expires_in = None, None
    if not isinstance(token, str) or not token:
        raise RegistryProtocolError(f"the token server {realm_host} sent no token")
    return token, expires_in
