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
* proxies and pools from :mod:`rocmenv.registry.proxy`, trust from :mod:`rocmenv.registry.tls`,
  failures translated by :mod:`rocmenv.registry.failures`,
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

from rocmenv.errors import RegistryUnavailable
from rocmenv.grammar.reference import is_loopback_host
from rocmenv.redact import redact
from rocmenv.registry.failures import FallBackToHttp, Transient, short, too_large, translate
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

    def _manager(self, proxy: str | None) -> urllib3.PoolManager:
        """The connection pools for requests through ``proxy`` (``None``: direct), made once."""
        with self._lock:
            manager = self._managers.get(proxy)
            if manager is None:
                from rocmenv.registry.proxy import pool_manager

                manager = self._managers[proxy] = pool_manager(proxy)
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
            raw = self._urlopen(manager, method, url, full, body, timeout, host,
                                registry_host or host, insecure)  # fmt: skip
        except urllib3.exceptions.HTTPError as err:
            fallback = insecure and parts.scheme == "https" and host not in self._tls_ok
            raise translate(err, host, proxy, timeout, fallback=fallback,
                            stalled=lambda: self._stalled_by(deadline, host, url)) from err  # fmt: skip
        if insecure and parts.scheme == "https":
            with self._lock:
                self._tls_ok.add(host)
        hdrs = {k.lower(): v for k, v in raw.headers.items()}
        limit = parse_ratelimit(registry_host or host, hdrs)
        if limit is not None:
            with self._lock:
                self.ratelimits[limit.host] = limit
        return raw, hdrs, deadline

    def _urlopen(
        self,
        manager: urllib3.PoolManager,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        timeout: urllib3.Timeout,
        host: str,
        registry: str,
        insecure: bool,
    ) -> urllib3.BaseHTTPResponse:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https":
            return manager.urlopen(
                method,
                url,
                body=body,
                headers=headers,
                redirect=False,  # pragma: no mutate (retries=False follows none)
                retries=False,
                preload_content=False,
                timeout=timeout,
            )
        verify = not insecure
        pool_kwargs: dict[str, Any] = {"ssl_context": self._ssl_context(host, registry, verify)}
        if not verify:  # the context checks nothing; nor does urllib3 after it
            pool_kwargs.update(
                cert_reqs="CERT_NONE",
                assert_hostname=False,  # pragma: no mutate (no check under CERT_NONE)
            )
        pool = manager.connection_from_url(url, pool_kwargs=pool_kwargs)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        return pool.urlopen(
            method,
            target or "/",
            body=body,
            headers=headers,
            redirect=False,  # pragma: no mutate (retries=False follows none)
            retries=False,
            preload_content=False,
            timeout=timeout,
            assert_same_host=False,  # pragma: no mutate (the pool is the URL's)
        )

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
            raise too_large(host, url, cap_kind, cap, f"announces {int(length)} bytes")
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
                    raise too_large(host, url, cap_kind, cap, "sent more")
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as err:
            raw.close()
            if deadline - self._clock() <= 0.05:
                raise self._stalled(host, url, len(buf)) from err
            raise Transient(f"{host}: the answer stalled ({len(buf)} bytes received)") from err
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.DecodeError, OSError) as err:
            raw.close()
            if "IncompleteRead" in str(err):
                raise Transient(
                    f"{host}: the answer was truncated ({len(buf)} bytes received, "
                    f"{length or 'more'} announced)"
                ) from err
            raise Transient(f"{host}: the answer broke off: {short(str(err))}") from err
        return bytes(buf)

    def _stalled_by(self, deadline: float, host: str, url: str) -> RegistryUnavailable | None:
        """The stalled error when ``deadline`` has (all but) passed, else ``None``."""
        return self._stalled(host, url, 0) if self._clock() >= deadline - 0.05 else None

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
            except FallBackToHttp:
                host = urllib.parse.urlsplit(url).netloc
                with self._lock:
                    self._plain.add(host)
                url = "http://" + url.split("://", 1)[1]
                continue
            except Transient as err:
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
