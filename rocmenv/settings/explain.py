"""Every effective setting and where it came from: what ``rocmenv config show [--origin]``
prints (the answer to "why did it do that?").

Each value is read from the one :class:`~rocmenv.settings.resolve.Settings` a command would
run with, and its level from the origins the cascade recorded — nothing is resolved twice.
The untrusted policy is shown in trusted mode too (as it would apply), marked so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmenv.context import Context
from rocmenv.settings.declared import default
from rocmenv.settings.host import HOST_KEYS
from rocmenv.settings.images import IMAGES_ENV, IMAGES_KEYS
from rocmenv.settings.policy import POLICY_ENV, POLICY_KEYS
from rocmenv.settings.registry import REGISTRY_ENV, REGISTRY_KEYS
from rocmenv.settings.resolve import CASCADE, HOST_ENV, Origin, Settings, resolve_policy
from rocmenv.settings.site import site_paths
from rocmenv.settings.slurm import SLURM_KEYS


@dataclass(frozen=True, kw_only=True)
class Effective:
    key: str  # "engine", "registry.timeout", …
    value: Any  # JSON-compatible
    origin: Origin
    where: str  # the flag, the variable, the file; "built-in" for a default

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "value": self.value, "origin": self.origin, "where": self.where}


def effective(ctx: Context, settings: Settings) -> list[Effective]:
    """Every setting with its value, level and source, in a stable order."""
    origins = dict(settings.origins)
    policy = settings.policy
    if policy is None:  # trusted: what untrusted mode would apply
        policy = resolve_policy(ctx, settings.project, origins)
    out: list[Effective] = []

    def add(key: str, value: Any, setting: str | None = None) -> None:
        origin = origins.get(key, "default")
        out.append(Effective(key=key, value=_plain(value), origin=origin,
                             where=_where(ctx, settings, key, setting or key, origin)))  # fmt: skip

    add("profile", settings.profile.name)
    add("untrusted", settings.untrusted)
    add("engine", settings.engine)
    add("pull", settings.pull)
    add("shims", settings.shims)
    add("lockfile", settings.lockfile)
    add("disk-reserve", settings.disk_reserve)
    limits = dict(default("registry", "limits"))  # every kind, RESPONSE_ and CONTENT_LIMITS
    limits.update(settings.registry.limits)
    for key in REGISTRY_KEYS:
        value = getattr(settings.registry, key.replace("-", "_"))
        value = limits if key == "limits" else dict(value) if key == "mirrors" else value
        add(f"registry.{key}", value, "registry")
    for key in HOST_KEYS:
        add(f"host.{key}", getattr(settings.host, key.replace("-", "_")), "host")
    for key in SLURM_KEYS:
        add(f"slurm.{key}", getattr(settings.slurm, key.replace("-", "_")), "slurm")
    for key in POLICY_KEYS:
        value = getattr(policy, key.replace("-", "_"))
        if key == "ulimits":  # as the policy file writes them: name = N or "soft:hard"
            value = {u.name: u.soft if u.soft == u.hard else f"{u.soft}:{u.hard}" for u in value}
        add(f"policy.{key}", value, "policy")
    for key in IMAGES_KEYS:
        add(f"images.{key}", getattr(settings.images, key.replace("-", "_")), "images")
    return out


def files(ctx: Context, settings: Settings) -> dict[str, str | None]:
    """The configuration files looked for, and whether they were read."""
    read = {s.origin: str(s.path) for s in settings.project.sites}
    looked = dict(site_paths(ctx.env))
    return {
        "site": read.get("site") or (f"{looked['site']} (absent)" if "site" in looked else None),
        "user": read.get("user") or (f"{looked['user']} (absent)" if "user" in looked else None),
        "project": str(settings.project.path) if settings.project.path else None,
    }


def _plain(value: Any) -> Any:
    """A value as JSON shows it: tuples as lists, pairs as tables, paths as strings."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): _plain(v) for k, v in value}
        return [_plain(v) for v in value]
    return value


def _where(ctx: Context, settings: Settings, key: str, setting: str, origin: Origin) -> str:
    flag, variable, _profile_key, _site_key, _project_key = CASCADE[setting]
    sub = key.partition(".")[2]
    if origin == "flag":
        return flag or "a flag"
    if origin == "env":
        if setting == "registry":
            return next(v for v, k in REGISTRY_ENV.items() if k == sub)
        if setting == "host":
            return next(v for v, k in HOST_ENV.items() if k == sub)
        if setting == "images":
            return next(v for v, k in IMAGES_ENV.items() if k == sub)
        if setting == "policy":
            return f"{POLICY_ENV}={ctx.env.get(POLICY_ENV, '').strip()}"
        return variable or "the environment"
    if origin == "profile":
        return f"profile {settings.profile.name} ({settings.profile.source})"
    if origin in ("site", "user"):
        path = next(str(s.path) for s in settings.project.sites if s.origin == origin)
        return path
    if origin == "project":
        return settings.project.where
    return "built-in"
