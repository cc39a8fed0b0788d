"""`rocmenv doctor [--json]`: is this machine ready for rocmenv?

Checks, each independent (one failing does not hide the others): the configuration, the
lockfile, the container engine, the registries the project uses (``GET /v2/``: reachable,
and whether they want authentication), the AMD GPUs, and the shim catalogue. Exit 0 when
every check passes or only warns, 1 when one fails.

Registries are judged the way pulls will happen: the host the engine pulls each image from
(the canonical registry, or with ``[registry] pull-from-mirror`` the mirror that served the
pin, and for an unpinned image the registry's first mirror) must answer; any other host (a mirror, or the registry behind answering mirrors) that
does not answer is a warning while another host of the same registry answers. Engine
failures carry their cause's hint (:mod:`rocmenv.engine.hints`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rocmenv.context import Context

if TYPE_CHECKING:
    from rocmenv.image.lock import Lock
    from rocmenv.registry.client import RegistryClient
    from rocmenv.settings.resolve import Settings

DESCRIPTION = """\
Checks, each independent (one failing does not hide the others): the configuration, the
lockfile, the container engine, the registries the project uses (GET /v2/: reachable, and
whether they want authentication), the AMD GPUs, and the shim catalogue. Exit 0 when every
check passes or only warns, 1 when one fails.

Registries are judged the way pulls will happen: the host the engine pulls each image from
(the canonical registry, or with [registry] pull-from-mirror the mirror that served the pin,
and for an unpinned image the registry's first mirror) must answer; any other host that does
not answer is a warning while another host of the same registry answers."""

Status = Literal["ok", "warn", "fail"]
MARKS = {"ok": "✓", "warn": "!", "fail": "✗"}


@dataclass(frozen=True, kw_only=True)
class Finding:
    check: str
    status: Status
    detail: str
    hint: str | None = None


@dataclass
class _State:
    """What one check leaves for the next: the settings, the lock."""

    args: argparse.Namespace
    ctx: Context
    config: Settings | None = None
    lock: Lock | None = None


@dataclass(frozen=True, kw_only=True)
class _Route:
    """A registry as the project uses it: where lookups go, where the engine pulls from."""

    registry: str  # the canonical domain (docker.io)
    lookups: tuple[str, ...]  # resolve/pin/validate: mirrors first, then the registry itself
    pulls: frozenset[str] = field(default_factory=frozenset)  # the hosts `run`/`pull` use


def add_parser(sub: Any, name: str, help_text: str) -> None:
    from rocmenv.settings.choices import ENGINE_NAMES

    parser = sub.add_parser(name, help=help_text, description=DESCRIPTION)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--engine",
        choices=ENGINE_NAMES,
        help="check this engine instead of the configured/auto-detected one",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Every check in order, then the report; exit 1 when one failed."""
    state = _State(args=args, ctx=ctx)
    findings: list[Finding] = []
    for name, check in CHECKS:
        if name == "lockfile" and state.config is None:
            continue  # without a configuration there is no lockfile to name
        findings += _guard(name, check, state)
    return _report(ctx, findings, as_json=bool(args.json))


def _guard(name: str, check: Callable[[_State], list[Finding]], state: _State) -> list[Finding]:
    """The check's findings; an error it raised is its one failed finding."""
    from rocmenv.errors import RocmenvError

    try:
        return check(state)
    except RocmenvError as err:
        return [Finding(check=name, status="fail", detail=err.what, hint=err.hint)]


def _report(ctx: Context, findings: list[Finding], *, as_json: bool) -> int:
    from rocmenv.cli._common import emit, emit_json

    failed = any(f.status == "fail" for f in findings)
    if as_json:
        emit_json(ctx, {"ok": not failed, "checks": [f.__dict__ for f in findings]})
    else:
        for f in findings:
            emit(ctx, f"{MARKS[f.status]} {f.check}: {f.detail}")
            if f.hint and f.status != "ok":
                emit(ctx, f"    hint: {f.hint}")
    return 1 if failed else 0


# -- the checks ---------------------------------------------------------------------------


def _config(state: _State) -> list[Finding]:
    from rocmenv.settings.resolve import Flags, settings_for

    cfg = state.config = settings_for(state.ctx, Flags(engine=state.args.engine))
    where = (
        str(cfg.project.path) if cfg.project.path else "no rocmenv.toml (built-in profiles only)"
    )
    profiles = ", ".join(cfg.project.profile_names)
    return [
        Finding(check="config", status="ok",
                detail=f"{where}; profiles: {profiles}; default {cfg.profile.name}")
    ]  # fmt: skip


def _lockfile(state: _State) -> list[Finding]:
    from rocmenv.image.lock import read_lock

    assert state.config is not None
    path = state.config.lockfile
    lock = state.lock = read_lock(path)
    if not path.exists():
        return [Finding(check="lockfile", status="warn", detail=f"{path} does not exist",
                        hint="run `rocmenv pin` to pin your profiles")]  # fmt: skip
    count = len(lock.profiles) + len(lock.references)
    return [Finding(check="lockfile", status="ok", detail=f"{path}: {count} pinned image(s)")]


def _engine(state: _State) -> list[Finding]:
    from rocmenv.engine.select import open_engine
    from rocmenv.redact import redact

    name = state.config.engine if state.config else (state.args.engine or "auto")
    info = open_engine(state.ctx, name).ping()
    detail = (
        f"{info.kind}: {info.name or 'engine'} {info.version} (API {info.api_version}, {info.os})"
    )
    return [Finding(check="engine", status="ok", detail=redact(detail)), _cdi(info, state.config)]


def _cdi(info: Any, cfg: Any) -> Finding:
    """Whether the engine takes CDI device names (``gpu-devices = "cdi"``): a warning only
    when the selected profile uses them."""
    from rocmenv.container.cdi import cdi_support

    ok, why = cdi_support(info.kind, info.version)
    wanted = cfg is not None and cfg.profile.gpu_devices == "cdi"
    return Finding(
        check="cdi",
        status="ok" if ok or not wanted else "warn",
        detail=("supported: " if ok else "not supported: ") + why,
        hint=None if ok else 'use gpu-devices = "nodes" (the default) with this engine',
    )


def _registries(state: _State) -> list[Finding]:
    from rocmenv.image.pinning import make_client

    cfg = state.config
    if cfg is None:
        return []
    with make_client(state.ctx, cfg) as client:
        routes = _routes(cfg, state.lock, client)
        answers = {host: _ping(client, host) for route in routes for host in route.lookups}
        out = [finding for route in routes for finding in _judge(route, answers, cfg)]
        out += _pull_limits(client, state.lock, cfg)
    if not out:
        nothing = "no profile or lock entry names an image: nothing to check"
        return [Finding(check="registry", status="warn", detail=nothing)]
    return out


def _gpus(state: _State) -> list[Finding]:
    from rocmenv.container.pool import host_inventory

    cfg = state.config
    if cfg is None:
        return []
    inv = host_inventory(cfg.host)
    if not inv.gpus:
        detail = f"no AMD GPUs under {cfg.host.sysfs_root} (fine for the cpu profile)"
        hint = "load amdgpu, or use --gpus none / the cpu profile"
        return [Finding(check="gpus", status="warn", detail=detail, hint=hint)]
    targets = ", ".join(sorted({g.gfx for g in inv.gpus}))
    detail = f"{len(inv.gpus)} GPU(s): {targets}"
    if inv.pool_source is not None:
        detail += f"; the pool: {len(inv.pool)} ({inv.pool_source})"
    if not inv.pool:
        hint = "see `rocmenv gpus`: no GPU of the pool has its device node here"
        return [Finding(check="gpus", status="fail", detail=detail, hint=hint)]
    return [Finding(check="gpus", status="ok", detail=detail)]


def _shims(state: _State) -> list[Finding]:
    from rocmenv.shims.catalogue import discover_shims

    found = discover_shims()
    names = ", ".join(s.name for s in found)
    return [Finding(check="shims", status="ok", detail=f"{len(found)} shim(s): {names}")]


CHECKS: tuple[tuple[str, Callable[[_State], list[Finding]]], ...] = (
    ("config", _config),
    ("lockfile", _lockfile),
    ("engine", _engine),
    ("registry", _registries),
    ("gpus", _gpus),
    ("shims", _shims),
)


# -- registries, the way pulls will happen ------------------------------------------------


def _routes(cfg: Settings, lock: Lock | None, client: RegistryClient) -> list[_Route]:
    """Every registry the lock and the profiles name, with its lookup and pull hosts."""
    from rocmenv.grammar.reference import parse
    from rocmenv.image.pinning import engine_reference, profile_key, unpinned_reference

    pulls: dict[str, set[str]] = {}  # canonical domain -> hosts the engine pulls from
    lookups: dict[str, tuple[str, ...]] = {}
    pinned = set(lock.profiles) if lock is not None else set()
    for _, _, entry in lock.entries() if lock is not None else ():
        ref = parse(entry.repository)
        source = engine_reference(entry.repository, entry.digest, entry.registry,
                                  pull_from_mirror=cfg.registry.pull_from_mirror)  # fmt: skip
        pulls.setdefault(ref.domain, set()).add(client.hosts_for(source)[-1])
        lookups[ref.domain] = tuple(client.hosts_for(ref))
    for name, prof in cfg.project.profiles:
        if prof.image is None:
            continue
        ref = parse(prof.image.repository)
        lookups[ref.domain] = tuple(client.hosts_for(ref))
        if profile_key(name) not in pinned:  # unpinned: canonical, or pull-from-mirror's mirror
            source = unpinned_reference(ref, cfg.registry)
            pulls.setdefault(ref.domain, set()).add(client.hosts_for(source)[-1])
    routes = []
    for domain, hosts in lookups.items():
        pulled = pulls.get(domain, set())
        every = tuple(dict.fromkeys([*hosts, *sorted(pulled)]))
        routes.append(_Route(registry=domain, lookups=every, pulls=frozenset(pulled)))
    return routes


def _ping(client: RegistryClient, host: str) -> tuple[bool, str]:
    """``GET /v2/`` on ``host``: (answers, what it said)."""
    from rocmenv.redact import redact

    url = f"{client.scheme_for(host)}://{host}/v2/"
    try:
        resp = client.transport.send_with_retries("GET", url, {}, "ping")
    except Exception as err:  # every failure is a finding
        return False, redact(str(err).splitlines()[0])
    if resp.status == 200:
        return True, f"{url} answers (no authentication needed)"
    if resp.status == 401:
        scheme = (resp.header("www-authenticate") or "").split(" ", 1)[0]
        return True, f"{url} answers and asks for authentication ({scheme})"
    return False, f"{url} answered HTTP {resp.status}"


def _judge(route: _Route, answers: dict[str, tuple[bool, str]], cfg: Settings) -> list[Finding]:
    """One finding per host of the route: a pull host that does not answer fails; another
    host fails only when no host of its registry answers."""
    answering = [h for h in route.lookups if answers[h][0]]
    out = []
    for host in route.lookups:
        ok, detail = answers[host]
        check = f"registry {host}"
        if ok:
            out.append(Finding(check=check, status="ok", detail=detail))
        elif host in route.pulls or not answering:
            out.append(Finding(check=check, status="fail", detail=detail,
                               hint=_pull_hint(route, host, answering, cfg)))  # fmt: skip
        else:
            used = ", ".join(answering)
            out.append(Finding(check=check, status="warn", detail=detail,
                               hint=f"{route.registry} is reached through {used}, which "
                               "answers; pulls do not use this host"))  # fmt: skip
    return out


def _pull_hint(route: _Route, host: str, answering: list[str], cfg: Settings) -> str:
    mirrors = [h for h in answering if h in cfg.registry.mirrors_for(route.registry)]
    if host not in route.pulls or not mirrors:
        return "check the network, proxy, or [registry] mirrors"
    if not cfg.registry.pull_from_mirror:
        return (
            f"the engine pulls {route.registry} images from {host}; the mirror {mirrors[0]} "
            "answers: set [registry] pull-from-mirror = true and pin through it (`rocmenv "
            "pin --update`), or give the daemon a registry-mirror"
        )
    return (
        f"with pull-from-mirror the engine pulls a pinned image from the host that served the "
        f"pin, here {host}: pin it again through {mirrors[0]} (`rocmenv pin --update`)"
    )


def _pull_limits(client: Any, lock: Any, cfg: Any) -> list[Finding]:
    """``ratelimit-remaining`` per registry that sends it (Docker Hub), read from one manifest
    ``HEAD`` per registry — a HEAD does not count against the pull limit."""
    from rocmenv.errors import RocmenvError
    from rocmenv.grammar.reference import Reference, parse

    refs: dict[str, Reference] = {}
    if lock is not None:
        for _, _, entry in lock.entries():
            repo = parse(entry.repository)
            refs.setdefault(
                repo.domain, Reference(domain=repo.domain, path=repo.path, digest=entry.digest)
            )
    for _, prof in cfg.project.profiles:
        if prof.image is not None and prof.image.tag:
            repo = parse(prof.image.repository)
            refs.setdefault(repo.domain, repo.with_tag(prof.image.tag))
    for ref in refs.values():
        try:
            client.head_manifest(ref)
        except RocmenvError:
            continue  # reachability is reported above
    out = []
    for limit in client.ratelimits():
        if limit["remaining"] is None:
            continue
        low = limit["remaining"] < client.settings.ratelimit_warning
        window = f" per {limit['window'] // 3600} h" if limit["window"] else ""
        out.append(
            Finding(
                check=f"pull limit {limit['host']}",
                status="warn" if low else "ok",
                detail=f"{limit['remaining']} of {limit['limit']} pulls left{window} "
                "(ratelimit-remaining)",
                hint="`docker login` raises the limit; a mirror spares it" if low else None,
            )
        )
    return out
