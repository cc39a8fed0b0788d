"""Registry authentication: challenges, bearer tokens, Basic auth, Docker config credentials.

Credentials are read through docker-py's ``docker.auth`` (config file and credential
helpers), imported only when a registry actually challenges us. Every secret handled is
registered with :mod:`rocmenv.redact`, so it never appears in a message.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from rocmenv.context import Context
from rocmenv.errors import RegistryAuthError, RegistryProtocolError
from rocmenv.redact import redact, register_secret
from rocmenv.registry.transport import Transport


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


class RegistryAuth:
    """Tokens per (host, scope), Basic headers per host, credentials per host; thread-safe."""

    def __init__(self, ctx: Context, transport: Transport) -> None:
        self.ctx = ctx
        self.transport = transport
        self._tokens: dict[tuple[str, str], str] = {}
        self._basic: dict[str, str] = {}  # host -> "Basic …" for registries that asked for it
        self._creds: dict[str, tuple[str, str] | None] = {}
        self._lock = threading.Lock()

    def user_for(self, host: str) -> str | None:
        creds = self._creds.get(host)
        return creds[0] if creds else None

    def forget(self, host: str, scope: str) -> None:
        with self._lock:
            self._tokens.pop((host, scope), None)

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

    def header(self, host: str, scope: str) -> dict[str, str]:
        with self._lock:
            token = self._tokens.get((host, scope))
            basic = self._basic.get(host)
        if token:
            return {"Authorization": f"Bearer {token}"}
        if basic:
            return {"Authorization": basic}
        return {}

    def authenticate(self, host: str, registry_name: str, scope: str, challenge_value: str) -> None:
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
        if realm_parts.scheme == "http" and self.transport.scheme_for(realm_parts.netloc) != "http":
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
        resp = self.transport.send_with_retries("GET", url, headers, "token")
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
