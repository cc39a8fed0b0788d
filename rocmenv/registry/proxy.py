"""Which forward proxy a registry request goes through, read as requests/curl read it, and
urllib3's pools for it (:func:`pool_manager`).

* ``[registry] proxy`` in the config, when set, wins over the environment.
* Otherwise ``https_proxy``/``HTTPS_PROXY`` for HTTPS URLs, ``http_proxy``/``HTTP_PROXY`` for
  HTTP URLs, then ``all_proxy``/``ALL_PROXY``; the lower-case spelling wins (as in requests).
* ``no_proxy``/``NO_PROXY`` (plus ``[registry] no-proxy``): comma- or space-separated entries;
  ``*`` bypasses every host; ``example.com`` and ``.example.com`` match the host and its
  subdomains; ``host:port`` matches only that port; ``10.0.0.0/8`` or ``::1/128`` (CIDR)
  matches IP addresses in the network; an IP address matches itself.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from rocmenv.errors import ConfigError

if TYPE_CHECKING:
    import urllib3


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name.lower()) or env.get(name.upper())
    return value.strip() if value and value.strip() else None


def no_proxy_entries(env: Mapping[str, str], extra: Iterable[str] = ()) -> list[str]:
    raw = _env(env, "no_proxy") or ""
    entries = [e for e in raw.replace(" ", ",").split(",") if e.strip()]
    return [e.strip() for e in (*entries, *extra) if e.strip()]


def bypasses(host: str, port: int, entries: Iterable[str]) -> bool:
    """Whether ``host:port`` is excluded from proxying by the ``NO_PROXY`` entries."""
    host = host.strip("[]").lower().rstrip(".")
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for entry in entries:
        entry = entry.strip().lower()
        if entry == "*":
            return True
        if "/" in entry and ip is not None:
            try:
                if ip in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name, want_port = entry, None
        if entry.startswith("["):  # [::1]:5000
            name, _, rest = entry[1:].partition("]")
            want_port = rest[1:] if rest.startswith(":") else None
        elif entry.count(":") == 1:
            name, _, want_port = entry.partition(":")
        if want_port is not None and want_port != str(port):
            continue
        name = name.lstrip(".").rstrip(".")
        if not name:
            continue
        if host == name or (ip is None and host.endswith("." + name)):
            return True
    return False


def proxy_for(
    url: str, env: Mapping[str, str], proxy: str | None = None, no_proxy: Iterable[str] = ()
) -> str | None:
    """The proxy URL for ``url`` (``None`` = connect directly)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme
    port = parts.port or (443 if scheme == "https" else 80)
    if bypasses(parts.hostname or "", port, no_proxy_entries(env, no_proxy)):
        return None
    chosen = proxy or _env(env, f"{scheme}_proxy") or _env(env, "all_proxy")
    if not chosen:
        return None
    if "://" not in chosen:
        chosen = "http://" + chosen  # curl's default
    proxy_parts = urllib.parse.urlsplit(chosen)
    if proxy_parts.scheme not in ("http", "https") or not proxy_parts.hostname:
        from rocmenv.redact import redact

        raise ConfigError(
            f"proxy {redact(chosen)!r} for {scheme} is not an http:// or https:// URL",
            hint="set HTTPS_PROXY/HTTP_PROXY (or [registry] proxy) to http://host:port; "
            "SOCKS proxies are not supported",
        )
    return chosen


def pool_manager(proxy: str | None) -> urllib3.PoolManager:
    """urllib3's pools for requests made directly (``proxy`` None) or through ``proxy``, its
    credentials sent as Basic auth and registered as secrets (never in a message)."""
    import urllib3

    from rocmenv.registry.connect import pool_classes

    # Not mutated (equivalent): the pools' sizes only change how many idle connections are
    # kept, and every urlopen passes retries=False itself.
    manager: urllib3.PoolManager
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
    manager.pool_classes_by_scheme = pool_classes()
    return manager
