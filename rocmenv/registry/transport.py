"""The registry client's transport, on urllib3: connections, proxies, TLS, caps, deadlines,
retries.

urllib3 (a maintained library, already installed through docker-py → requests) owns HTTP/1.1:
keep-alive pools shared by every host of a command (registry, token realm, blob CDN), proxy
tunnels, TLS, chunked and gzip bodies. rocmenv keeps its policy above it:

* **bounded against hostile servers** — every response body is read in pieces under a size cap
  by kind (``[registry] limits``: tags, manifest, index, config, token, error), refused at once
  when ``Content-Length`` already exceeds it; every request has a total deadline
  (``request-deadline``) and the command as a whole another (``command-deadline``), checked
  between reads, so a server dripping a byte every half second cannot hold a command;
* **retries** — 408/429/5xx answers and connection failures (a name that does not resolve is
  not retried: offline or misspelt, a retry changes neither), exponential backoff with jitter,
  ``Retry-After`` honoured up to 120 s (a connection the server closed while idle — a TLS EOF on
  keep-alive — is noticed by urllib3 before reuse and replaced, at no retry);
* **schemes** — HTTPS everywhere; plain HTTP for loopback registries (``ipaddress`` loopback or
  exactly ``localhost``) unless a certs.d directory exists for them; ``insecure`` registries
  as Docker treats them: HTTPS without verification, then HTTP;
* proxies from :mod:`rocmenv.registry.proxy`, trust from :mod:`rocmenv.registry.tls`,
  connections raced across addresses by :mod:`rocmenv.registry.connect` (happy eyeballs);
* every round trip counted by kind (:class:`RegistryStats`), ``ratelimit-*`` headers kept
  per host (:attr:`Transport.ratelimits`).

urllib3 stays (conventions rule 11, issue 20 item 2): its import (~40 ms quiet) now runs
while the first connection's TCP and TLS handshake are made on the dialling thread
(:meth:`Transport.dial_ahead`), so at 30 ms RTT a quiet machine waits for the network, not
for the import; ``http.client`` alone would gain only under load or near 0 ms RTT, and would
have to pass the proxy, TLS, hostile-server, cap, deadline and redirect tests unchanged.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from rocmenv.errors import RegistryProtocolError, RegistryUnavailable
from rocmenv.grammar.reference import is_loopback_host
from rocmenv.redact import redact
from rocmenv.registry.response import (
    BodyStream,
    RateLimit,
    RegistryStats,
    Response,
    parse_ratelimit,
    retry_after,
)
from rocmenv.settings.registry import RegistrySettings

if TYPE_CHECKING:
    import ssl

    import urllib3

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 120.0
USER_AGENT = "rocmenv (+https://github.com/rocmenv)"
CHUNK = 64 * 1024
INDEX_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
#: request kind → response size cap kind (``manifest-get`` picks manifest or index by type)
CAP_KIND = {"tags": "tags", "manifest-get": "manifest", "blob": "config", "token": "token"}


class _Transient(Exception):
    """A failure worth retrying (connection trouble, timeouts, truncation)."""


class Transport:
    """Connections, retries, caps, deadlines and round-trip counting, shared by the client and
    its auth. Thread-safe (urllib3 pools are)."""

    def __init__(
        self,
        settings: RegistrySettings,
        env: Mapping[str, str],
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.env = env
        self.stats = RegistryStats()
        self.ratelimits: dict[str, RateLimit] = {}
        self._sleep = sleep
        self._clock = clock
        self._command_end = clock() + settings.command_deadline
        backoff = env.get("ROCMENV_REGISTRY_BACKOFF")
        try:
            self._backoff = float(backoff) if backoff else 0.5
        except ValueError:
            self._backoff = -1.0  # pragma: no mutate (any value out of range)
        if not 0 <= self._backoff <= 60:
            from rocmenv.errors import ConfigError

            raise ConfigError(
                f"ROCMENV_REGISTRY_BACKOFF={backoff!r} is not a number of seconds from 0 to 60"
            )
        self._lock = threading.Lock()
        self._building = threading.Lock()  # held while an SSL context is built
        self._managers: dict[str | None, urllib3.PoolManager] = {}
        self._contexts: dict[tuple[Any, ...], ssl.SSLContext] = {}
        self._plain: set[str] = set()  # insecure hosts that answered only plain HTTP
        self._tls_ok: set[str] = set()  # insecure hosts that answered over HTTPS
        self._first = True  # the first request dials ahead (rocmenv.registry.connect.predial)
        self._dialled = False  # pragma: no mutate (None: as false)

    def close(self) -> None:
        with self._lock:
            managers = list(self._managers.values())
            self._managers.clear()
        for manager in managers:
            manager.clear()
        if self._dialled:
            from rocmenv.registry.connect import discard_predials

            discard_predials()

    # -- where and how ----------------------------------------------------------------------

    def is_insecure(self, host: str) -> bool:
        return host in self.settings.insecure

    def scheme_for(self, host: str) -> str:
        """HTTPS, except loopback registries without certs.d and insecure ones without TLS."""
        if host in self._plain:
            return "http"
        if is_loopback_host(host) and not self.is_insecure(host):
            from rocmenv.registry.tls import has_certs_dir

            return "https" if has_certs_dir(host, self.env) else "http"
        return "https"

    def dial_ahead(self, url: str, registry_host: str | None = None) -> None:
        """Start connecting to ``url``'s host now when the request will go there over
        verified HTTPS without a proxy (:func:`rocmenv.registry.connect.predial`)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            return
        if self.is_insecure(registry_host or parts.netloc) or self.is_insecure(parts.netloc):
            return
        from rocmenv.registry.proxy import proxy_for

        if proxy_for(url, self.env, self.settings.proxy, self.settings.no_proxy) is not None:
            return
        from rocmenv.registry.connect import predial

        self._dialled = True
        # pragma: the floor only matters with under a second of the command left, and the
        # first request is made at its start
        within = min(self.settings.timeout, max(0.0, self.deadline_left()))  # pragma: no mutate
        host = parts.netloc

        def tls() -> ssl.SSLContext:  # on the dialling thread: the handshake's context
            return self._ssl_context(host, registry_host or host, True)

        predial(parts.hostname, parts.port or 443, within, tls)

    def _manager(self, key: str | None) -> urllib3.PoolManager:
        proxy = key
        with self._lock:
            manager = self._managers.get(key)
            if manager is None:
                import urllib3

                # Not mutated (equivalent): the pools' sizes only change how many idle
                # connections are kept, and every urlopen passes retries=False itself.
                if proxy is None:
                    manager = urllib3.PoolManager(
                        num_pools=32,  # pragma: no mutate
                        maxsize=4,  # pragma: no mutate
                        retries=False,  # pragma: no mutate
                    )
                else:
                    parts = urllib.parse.urlsplit(proxy)
                    headers = None  # pragma: no mutate (urllib3 sends no header for "")
                    if parts.username is not None:
                        from rocmenv.redact import register_secret

                        password = urllib.parse.unquote(parts.password or "")
                        userinfo = urllib.parse.unquote(parts.username) + ":" + password
                        register_secret(parts.password)  # as written in the URL, and as sent
                        register_secret(password)
                        headers = urllib3.make_headers(proxy_basic_auth=userinfo)
                        netloc = parts.hostname or ""
                        if ":" in netloc:
                            netloc = f"[{netloc}]"
                        if parts.port:
                            netloc += f":{parts.port}"
                        proxy = urllib.parse.urlunsplit((parts.scheme, netloc, "", "", ""))
                    manager = urllib3.ProxyManager(
                        proxy,
                        proxy_headers=headers,
                        num_pools=32,  # pragma: no mutate
                        maxsize=4,  # pragma: no mutate
                        retries=False,  # pragma: no mutate
                    )
                from rocmenv.registry.connect import pool_classes

                manager.pool_classes_by_scheme = pool_classes()
                self._managers[key] = manager
            return manager

    def _ssl_context(self, host: str, registry: str, verify: bool) -> ssl.SSLContext:
        """One context per distinct set of trust inputs, shared by every host it applies to."""
        from rocmenv.registry.tls import build_context, trust_inputs

        cas, pairs = trust_inputs(host, self.env, registry)
        key = (cas, pairs, verify)
        with self._building:  # the registry and its realm, dialled together, build it once
            ctx = self._contexts.get(key)
            if ctx is None:
                ctx = self._contexts[key] = build_context(self.env, cas, pairs, verify=verify)
        return ctx

    # -- one round trip ---------------------------------------------------------------------

    def deadline_left(self) -> float:
        return self._command_end - self._clock()

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        kind: str,
        *,
        registry_host: str | None = None,
        body: bytes | None = None,
    ) -> Response:
        """One request, its body read under the cap of ``kind`` within the deadlines.

        ``registry_host``: the registry this request is for (its insecure setting applies).
        """
        raw, hdrs, deadline = self._open(
            method, url, headers, kind, registry_host=registry_host, body=body
        )
        try:
            if method == "HEAD" or raw.status in (204, 304):
                data = b""
            else:
                host = urllib.parse.urlsplit(url).netloc
                data = self._read_body(raw, hdrs, kind, host, url, deadline)
        finally:
            raw.release_conn()
        return Response(status=raw.status, headers=hdrs, body=data, url=url)

    def _open(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        kind: str,
        *,
        registry_host: str | None = None,
        body: bytes | None = None,
        whole_command: bool = False,
    ) -> tuple[urllib3.BaseHTTPResponse, dict[str, str], float]:
        """Send the request and read the answer's head: the response (its body unread), its
        headers (lower-case names) and the deadline its body must arrive by."""
        parts = urllib.parse.urlsplit(url)
        host = parts.netloc
        insecure = self.is_insecure(registry_host or host) or self.is_insecure(host)
        from rocmenv.registry.proxy import proxy_for

        proxy = proxy_for(url, self.env, self.settings.proxy, self.settings.no_proxy)
        if self._first:  # HTTPS straight to the host: connect while urllib3 is imported
            self._first = False  # pragma: no mutate (None: as false)
            self.dial_ahead(url, registry_host)
        import urllib3

        now = self._clock()
        if now >= self._command_end:
            raise RegistryUnavailable(
                f"the registry requests of this command took longer than its deadline "
                f"({self.settings.command_deadline:g} s); stopped before {method} {redact(url)}",
                hint="the registry or a proxy on the way is too slow or stalling; raise "
                "[registry] command-deadline or ROCMENV_REGISTRY_DEADLINE if it is just slow",
            )
        deadline = (
            self._command_end
            if whole_command
            else min(now + self.settings.request_deadline, self._command_end)
        )
        left = deadline - now
        timeout = urllib3.Timeout(
            connect=min(self.settings.timeout, left), read=min(self.settings.timeout, left)
        )
        manager = self._manager(proxy)
        from rocmenv.registry.connect import DEADLINE_HEADER

        full = {
            "User-Agent": USER_AGENT,
            "Accept-Encoding": "gzip",
            **headers,
            DEADLINE_HEADER: repr(deadline),  # removed by the connection before sending
        }
        self.stats.add(kind)
        try:
            if parts.scheme == "https":
                verify = not insecure
                pool_kwargs: dict[str, Any] = {
                    "ssl_context": self._ssl_context(host, registry_host or host, verify)
                }
                if not verify:  # the context checks nothing; nor does urllib3 after it
                    pool_kwargs.update(
                        cert_reqs="CERT_NONE",
                        assert_hostname=False,  # pragma: no mutate (no check under CERT_NONE)
                    )
                pool = manager.connection_from_url(url, pool_kwargs=pool_kwargs)
                target = parts.path + (f"?{parts.query}" if parts.query else "")
                raw = pool.urlopen(
                    method,
                    target or "/",
                    body=body,
                    headers=full,
                    redirect=False,  # pragma: no mutate (retries=False follows none)
                    retries=False,
                    preload_content=False,
                    timeout=timeout,
                    assert_same_host=False,  # pragma: no mutate (the pool is the URL's)
                )
            else:
                raw = manager.urlopen(
                    method,
                    url,
                    body=body,
                    headers=full,
                    redirect=False,  # pragma: no mutate (retries=False follows none)
                    retries=False,
                    preload_content=False,
                    timeout=timeout,
                )
        except urllib3.exceptions.SSLError as err:
            if insecure and parts.scheme == "https" and host not in self._tls_ok:
                raise _FallBackToHttp() from err
            text = str(err)
            if "CERTIFICATE_VERIFY_FAILED" in text or "certificate" in text.lower():
                raise RegistryUnavailable(
                    f"{host}: the TLS certificate is not trusted ({_short(text)})",
                    hint=f"add the registry's CA to /etc/docker/certs.d/{host}/ca.crt, or point "
                    "SSL_CERT_FILE/REQUESTS_CA_BUNDLE at it; list it under [registry] insecure "
                    "only if unverified HTTPS is acceptable",
                ) from err
            raise _Transient(f"{host}: TLS error: {_short(text)}") from err
        except urllib3.exceptions.NameResolutionError as err:
            raise _unresolved(host, err) from err
        except urllib3.exceptions.ProxyError as err:
            cause = getattr(err, "original_error", None)
            if isinstance(cause, urllib3.exceptions.NameResolutionError):
                raise _unresolved(f"proxy {redact(str(proxy))}", cause) from err
            raise _Transient(
                f"{host}: through proxy {redact(str(proxy))}: {_short(str(err))}"
            ) from err
        except (
            urllib3.exceptions.NewConnectionError,
            urllib3.exceptions.ConnectTimeoutError,
        ) as err:
            if insecure and parts.scheme == "https" and host not in self._tls_ok:
                raise _FallBackToHttp() from err
            if isinstance(err, urllib3.exceptions.NewConnectionError):  # refused, unreachable
                reason = str(err).rsplit("Failed to establish a new connection: ", 1)[-1]
            else:  # urllib3's text names its connection object and the address
                reason = f"no connection within {timeout.connect_timeout:g} s"
            raise _Transient(f"{host}: cannot connect: {_short(reason)}") from err
        except urllib3.exceptions.ReadTimeoutError as err:
            if self._clock() >= deadline - 0.05:
                raise self._stalled(host, url, 0) from err
            raise _Transient(f"{host}: no answer within {timeout.read_timeout} s") from err
        except urllib3.exceptions.ProtocolError as err:
            if self._clock() >= deadline - 0.05:
                raise self._stalled(host, url, 0) from err
            text = str(err)
            if insecure and parts.scheme == "https" and host not in self._tls_ok:
                raise _FallBackToHttp() from err
            raise _Transient(f"{host}: {_short(text)}") from err
        except urllib3.exceptions.HTTPError as err:
            raise _Transient(f"{host}: {_short(str(err))}") from err
        if insecure and parts.scheme == "https":
            with self._lock:
                self._tls_ok.add(host)
        hdrs = {k.lower(): v for k, v in raw.headers.items()}
        limit = parse_ratelimit(registry_host or host, hdrs)
        if limit is not None:
            with self._lock:
                self.ratelimits[limit.host] = limit
        return raw, hdrs, deadline

    def _read_body(
        self,
        raw: urllib3.BaseHTTPResponse,
        hdrs: Mapping[str, str],
        kind: str,
        host: str,
        url: str,
        deadline: float,
    ) -> bytes:
        import urllib3

        cap_kind = CAP_KIND.get(kind, "error") if 200 <= raw.status < 300 else "error"
        if cap_kind == "manifest" and hdrs.get("content-type", "").split(";")[0].strip() in (
            INDEX_MEDIA_TYPES
        ):
            cap_kind = "index"
        cap = self.settings.limit(cap_kind)
        length = hdrs.get("content-length", "")
        if length.strip().isdigit() and int(length) > cap:
            raw.close()
            raise _too_large(host, url, cap_kind, cap, f"announces {int(length)} bytes")
        buf = bytearray()
        sock = getattr(getattr(raw, "connection", None), "sock", None)
        try:
            while True:
                left = deadline - self._clock()
                if left <= 0:
                    raw.close()
                    raise self._stalled(host, url, len(buf))
                if sock is not None:
                    sock.settimeout(max(0.01, min(self.settings.timeout, left)))
                chunk = raw.read1(CHUNK)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > cap:
                    raw.close()
                    raise _too_large(host, url, cap_kind, cap, "sent more")
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as err:
            raw.close()
            if deadline - self._clock() <= 0.05:
                raise self._stalled(host, url, len(buf)) from err
            raise _Transient(f"{host}: the answer stalled ({len(buf)} bytes received)") from err
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.DecodeError, OSError) as err:
            raw.close()
            if "IncompleteRead" in str(err):
                raise _Transient(
                    f"{host}: the answer was truncated ({len(buf)} bytes received, "
                    f"{length or 'more'} announced)"
                ) from err
            raise _Transient(f"{host}: the answer broke off: {_short(str(err))}") from err
        return bytes(buf)

    def _stalled(self, host: str, url: str, received: int) -> RegistryUnavailable:
        return RegistryUnavailable(
            f"{host}: the answer to {redact(url)} was still arriving after "
            f"{min(self.settings.request_deadline, self.settings.command_deadline):g} s "
            f"({received} bytes so far); gave up",
            hint="the registry or a proxy on the way is stalling; raise [registry] "
            "request-deadline or command-deadline (ROCMENV_REGISTRY_DEADLINE) if it is only slow",
        )

    # -- policy -----------------------------------------------------------------------------

    def send_with_retries(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        kind: str,
        *,
        registry_host: str | None = None,
        no_retry: Collection[int] = (),
        body: bytes | None = None,
    ) -> Response:
        """:meth:`send` with the retry policy; ``no_retry``: statuses returned at once."""
        return self._retrying(
            method,
            url,
            lambda u: self.send(method, u, headers, kind, registry_host=registry_host, body=body),
            no_retry,
        )

    def stream_with_retries(
        self, url: str, headers: Mapping[str, str], kind: str, *, registry_host: str | None = None
    ) -> BodyStream:
        """A ``GET`` whose body the caller reads in pieces (:class:`BodyStream`, undecoded),
        retried until the answer's head arrives. Bounded by the command's deadline and the
        read timeout, not by ``request-deadline``: a layer of gigabytes may take minutes."""

        def attempt(at: str) -> BodyStream:
            raw, hdrs, _ = self._open(
                "GET", at, headers, kind, registry_host=registry_host, whole_command=True
            )
            return BodyStream(
                raw,
                hdrs,
                at,
                time_left=self.deadline_left,
                timeout=self.settings.timeout,
                deadline=self.settings.command_deadline,
            )

        return self._retrying("GET", url, attempt)

    def _retrying(
        self,
        method: str,
        url: str,
        attempt_at: Callable[[str], _Answer],
        no_retry: Collection[int] = (),
    ) -> _Answer:
        attempts = self.settings.retries + 1
        # pragma: equivalent, every attempt that does not return sets it (retries >= 0)
        last = ""  # pragma: no mutate
        attempt = 0
        # pragma: "<=" is equivalent, the last attempt always breaks out (or returns) below
        while attempt < attempts:  # pragma: no mutate
            try:
                resp = attempt_at(url)
            except _FallBackToHttp:
                host = urllib.parse.urlsplit(url).netloc
                with self._lock:
                    self._plain.add(host)
                url = "http://" + url.split("://", 1)[1]
                continue
            except _Transient as err:
                last, wait = str(err), None
            else:
                if resp.status not in RETRY_STATUSES or resp.status in no_retry:
                    return resp
                if isinstance(resp, BodyStream):
                    resp.close()
                last = f"HTTP {resp.status} from {urllib.parse.urlsplit(url).netloc}"
                wait = retry_after(resp.header("retry-after"))
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
                    break  # a 5xx that outlived the retries: the registry is unavailable
            if attempt == attempts - 1:
                break
            if wait is None:
                import random  # only on a retry

                wait = min(30.0, self._backoff * (2**attempt)) * (0.5 + random.random() / 2)
            wait = min(wait, max(0.0, self.deadline_left()))
            self._sleep(wait)
            attempt += 1
        raise RegistryUnavailable(
            f"{method} {redact(url)} failed after {attempts} attempts: {last}",
            hint="check that the registry is up and reachable (network, proxy, firewall); "
            "set [registry] timeout/retries or ROCMENV_REGISTRY_TIMEOUT to adjust",
        )


_Answer = TypeVar("_Answer", Response, BodyStream)


class _FallBackToHttp(Exception):
    """An insecure registry that does not speak TLS: try plain HTTP (Docker's order)."""


def _unresolved(what: str, err: Exception) -> RegistryUnavailable:
    """A name that does not resolve: not retried (offline, or a typo — a retry changes
    neither), so an offline command says so at once."""
    reason = str(getattr(err, "__cause__", None) or err).rsplit("] ", 1)[-1]
    return RegistryUnavailable(
        f"{what}: the name does not resolve ({_short(reason)})",
        hint="check the name, the DNS and the network (is this machine offline?); a mirror "
        "([registry] mirrors) or a proxy (HTTPS_PROXY) that resolves it may help",
    )


def _short(text: str) -> str:
    text = redact(text)
    return text if len(text) <= 200 else text[:200] + "…"


def _too_large(host: str, url: str, kind: str, cap: int, how: str) -> RegistryProtocolError:
    return RegistryProtocolError(
        f"{host}: the {kind} response to {redact(url)} {how} than its limit of {cap} bytes"
        if how == "sent more"
        else f"{host}: the {kind} response to {redact(url)} {how}, over its limit of {cap} bytes",
        hint=f"a hostile or broken registry, mirror or proxy; if the registry is right, raise "
        f"[registry] limits.{kind}",
    )
