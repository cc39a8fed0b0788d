"""Registry settings: ``[registry]`` in the project file and the ``ROCMENV_*`` variables that
override it (mirrors, insecure hosts, timeouts and deadlines, response caps, proxy,
pull-from-mirror), validated when the configuration is read.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocmenv.errors import ConfigError
from rocmenv.grammar.reference import check_host
from rocmenv.record import record, replace
from rocmenv.settings.declared import (
    CONTENT_LIMITS,
    LIMIT_MAX,
    RESPONSE_LIMITS,
    default,
    keys,
    variables,
)
from rocmenv.settings.keys import as_str_list, check_keys

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Any

REGISTRY_KEYS = keys("registry")  # declared, with their defaults, in rocmenv.settings.declared
#: The variables that override ``[registry]`` keys, and the key each one sets.
REGISTRY_ENV: dict[str, str] = variables("registry")


@record
class RegistrySettings:
    mirrors: tuple[tuple[str, tuple[str, ...]], ...] = ()
    insecure: tuple[str, ...] = ()
    timeout: float = default("registry", "timeout")  # connect and between reads
    retries: int = default("registry", "retries")
    request_deadline: float = default("registry", "request-deadline")  # per request
    command_deadline: float = default("registry", "command-deadline")  # every request of one
    max_pages: int = default("registry", "max-pages")  # tag-list pages followed
    limits: tuple[tuple[str, int], ...] = ()  # overrides of RESPONSE_/CONTENT_LIMITS
    proxy: str | None = None  # overrides HTTPS_PROXY/HTTP_PROXY/ALL_PROXY
    no_proxy: tuple[str, ...] = ()  # added to NO_PROXY
    pull_from_mirror: bool = default("registry", "pull-from-mirror")  # through the mirror
    ratelimit_warning: int = default("registry", "ratelimit-warning")

    def limit(self, kind: str) -> int:
        for name, value in self.limits:
            if name == kind:
                return value
        return RESPONSE_LIMITS.get(kind) or CONTENT_LIMITS[kind]

    def mirrors_for(self, domain: str) -> tuple[str, ...]:
        for name, hosts in self.mirrors:
            if name == domain:
                return hosts
        return ()


def registry_settings(
    table: Any, where: str, base: RegistrySettings | None = None
) -> RegistrySettings:
    """``[registry]`` over ``base``: the keys the table sets replace the base's."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    check_keys(table, REGISTRY_KEYS, where)
    changes = _host_keys(table, where)  # checked in this order: the first bad key is reported
    changes.update(_number_keys(table, where))
    changes.update(_limit_keys(table, where))
    changes.update(_proxy_keys(table, where))
    return replace(base or RegistrySettings(), **changes)


def _host_keys(table: dict[str, Any], where: str) -> dict[str, Any]:
    """``mirrors`` and ``insecure``: the fields they set, each host checked."""
    changes: dict[str, Any] = {}
    if "mirrors" in table:
        if not isinstance(table["mirrors"], dict):
            raise ConfigError(f"{where}.mirrors must be a table of registry = [mirror, …]")
        mirrors: list[tuple[str, tuple[str, ...]]] = []
        for reg, hosts in table["mirrors"].items():
            check_host(reg, f"{where}.mirrors key {reg!r}")
            mirrors.append((reg, as_str_list(hosts, f"{where}.mirrors.{reg}")))
            for host in mirrors[-1][1]:
                check_host(host, f"{where}.mirrors.{reg}")
        changes["mirrors"] = tuple(mirrors)
    if "insecure" in table:
        insecure = as_str_list(table["insecure"], f"{where}.insecure")
        for host in insecure:
            check_host(host, f"{where}.insecure")
        changes["insecure"] = insecure
    return changes


def _number_keys(table: dict[str, Any], where: str) -> dict[str, Any]:
    """The timeout, retries, deadlines and counts: the fields they set, each range checked."""
    changes: dict[str, Any] = {}
    if "timeout" in table:
        t = table["timeout"]
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not _seconds_ok(t):
            raise ConfigError(
                f"{where}.timeout = {t!r}: must be a number of seconds above 0 and at most "
                f"{MAX_TIMEOUT:.0f}",
                hint="e.g. timeout = 30",
            )
        changes["timeout"] = float(t)
    if "retries" in table:
        r = table["retries"]
        if not isinstance(r, int) or isinstance(r, bool) or not 0 <= r <= 20:
            raise ConfigError(f"{where}.retries must be an integer from 0 to 20")
        changes["retries"] = r
    for key, attr in (
        ("request-deadline", "request_deadline"),
        ("command-deadline", "command_deadline"),
    ):
        if key in table:
            t = table[key]
            if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 < t <= 86400:
                raise ConfigError(f"{where}.{key} must be a number of seconds from 0 to 86400")
            changes[attr] = float(t)
    for key, attr in (("max-pages", "max_pages"), ("ratelimit-warning", "ratelimit_warning")):
        if key in table:
            n = table[key]
            if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= 1_000_000:
                raise ConfigError(f"{where}.{key} must be an integer from 0 to 1000000")
            changes[attr] = n
    return changes


def _limit_keys(table: dict[str, Any], where: str) -> dict[str, Any]:
    """``limits``: the response and content caps it overrides, each within its maximum."""
    if "limits" not in table:
        return {}
    limits = table["limits"]
    if not isinstance(limits, dict):
        raise ConfigError(f"{where}.limits must be a table of kind = bytes")
    check_keys(limits, tuple(LIMIT_MAX), f"{where}.limits")
    pairs = []
    for kind, n in limits.items():
        top = LIMIT_MAX[kind]
        if not isinstance(n, int) or isinstance(n, bool) or not 0 < n <= top:
            raise ConfigError(
                f"{where}.limits.{kind} must be a number of bytes up to "
                f"{'1 TiB' if top > 1 << 32 else '4 GiB'}"
            )
        pairs.append((kind, n))
    return {"limits": tuple(pairs)}


def _proxy_keys(table: dict[str, Any], where: str) -> dict[str, Any]:
    """``proxy``, ``no-proxy`` and ``pull-from-mirror``: the fields they set."""
    changes: dict[str, Any] = {}
    if "proxy" in table:
        if not isinstance(table["proxy"], str):
            raise ConfigError(f"{where}.proxy must be a URL string (http://host:port)")
        changes["proxy"] = table["proxy"] or None
    if "no-proxy" in table:
        changes["no_proxy"] = as_str_list(table["no-proxy"], f"{where}.no-proxy")
    if "pull-from-mirror" in table:
        if not isinstance(table["pull-from-mirror"], bool):
            raise ConfigError(f"{where}.pull-from-mirror must be true or false")
        changes["pull_from_mirror"] = table["pull-from-mirror"]
    return changes


def env_registry(env: Mapping[str, str], settings: RegistrySettings) -> RegistrySettings:
    """``ROCMENV_MIRRORS="docker.io=127.0.0.1:5000,docker.io=m2"``, ``ROCMENV_INSECURE_REGISTRIES``,
    ``ROCMENV_REGISTRY_TIMEOUT``, ``ROCMENV_REGISTRY_RETRIES``, ``ROCMENV_PULL_FROM_MIRROR``
    (``1/true/yes`` or ``0/false/no``: a runner behind a mirror says so without the project
    file)."""
    if env.get("ROCMENV_MIRRORS"):
        pairs: dict[str, list[str]] = {}
        for item in env["ROCMENV_MIRRORS"].split(","):
            reg, eq, mirror = item.strip().partition("=")
            if not eq or not reg or not mirror:
                raise ConfigError(f"ROCMENV_MIRRORS entry {item!r} is not REGISTRY=MIRROR")
            check_host(reg, "ROCMENV_MIRRORS")
            check_host(mirror, "ROCMENV_MIRRORS")
            pairs.setdefault(reg, []).append(mirror)
        settings = replace(settings, mirrors=tuple((k, tuple(v)) for k, v in pairs.items()))
    if env.get("ROCMENV_INSECURE_REGISTRIES"):
        settings = replace(
            settings,
            insecure=tuple(
                h.strip() for h in env["ROCMENV_INSECURE_REGISTRIES"].split(",") if h.strip()
            ),
        )
        for host in settings.insecure:
            check_host(host, "ROCMENV_INSECURE_REGISTRIES")
    if env.get("ROCMENV_REGISTRY_TIMEOUT"):
        settings = replace(settings, timeout=env_seconds(env, "ROCMENV_REGISTRY_TIMEOUT"))
    if env.get("ROCMENV_REGISTRY_RETRIES"):
        text = env["ROCMENV_REGISTRY_RETRIES"].strip()
        if not (text.isascii() and text.isdigit() and int(text) <= 20):
            raise ConfigError(
                f"ROCMENV_REGISTRY_RETRIES={text[:40]!r}: must be an integer from 0 to 20"
            )
        settings = replace(settings, retries=int(text))
    if env.get("ROCMENV_REGISTRY_DEADLINE"):
        settings = replace(settings, command_deadline=env_seconds(env, "ROCMENV_REGISTRY_DEADLINE"))
    if env.get("ROCMENV_PULL_FROM_MIRROR", "").strip():
        text = env["ROCMENV_PULL_FROM_MIRROR"].strip().lower()
        if text not in ("1", "true", "yes", "0", "false", "no"):
            raise ConfigError(
                f"ROCMENV_PULL_FROM_MIRROR={text[:40]!r}: must be 1/true/yes or 0/false/no"
            )
        settings = replace(settings, pull_from_mirror=text in ("1", "true", "yes"))
    return settings


#: The longest registry timeout accepted (a day): beyond it a hung registry hangs the job.
MAX_TIMEOUT = 86400.0


def _seconds_ok(value: float) -> bool:
    import math

    return math.isfinite(value) and 0 < value <= MAX_TIMEOUT


def env_seconds(env: Mapping[str, str], name: str) -> float:
    """A duration from the environment: finite, above 0, at most :data:`MAX_TIMEOUT`."""
    text = env[name].strip()
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not _seconds_ok(value):
        raise ConfigError(
            f"{name}={text[:40]!r}: must be a number of seconds above 0 and at most "
            f"{MAX_TIMEOUT:.0f}",
            hint=f"e.g. {name}=30",
        )
    return value
