"""`rocmenv doctor [--json]`: is this machine ready for rocmenv?

Checks, each independent (one failing does not hide the others): the configuration, the
lockfile, the container engine, the registries the project uses (``GET /v2/``: reachable,
and whether they want authentication), the AMD GPUs, and the shim catalogue. Exit 0 when
every check passes or only warns, 1 when one fails.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rocmenv.context import Context

Status = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, kw_only=True)
class Finding:
    check: str
    status: Status
    detail: str
    hint: str | None = None


def add_parser(sub: Any, name: str, help_text: str) -> None:
    parser = sub.add_parser(
        name, help=help_text, description=__doc__.split("\n\n", 1)[1] if __doc__ else None
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument(
        "--engine", help="check this engine instead of the configured/auto-detected one"
    )
    parser.set_defaults(func=run)


def _guard(check: str, body: Callable[[], list[Finding]]) -> list[Finding]:
    from rocmenv.errors import RocmenvError

    try:
        return body()
    except RocmenvError as err:
        return [Finding(check=check, status="fail", detail=err.what, hint=err.hint)]


def run(args: argparse.Namespace, ctx: Context) -> int:
    from rocmenv.cli._common import emit, emit_json
    from rocmenv.redact import redact

    findings: list[Finding] = []
    state: dict[str, Any] = {}

    def config() -> list[Finding]:
        from rocmenv.settings.resolve import Flags, settings_for

        cfg = settings_for(ctx, Flags(engine=args.engine))
        state["config"] = cfg
        where = (
            str(cfg.project.path)
            if cfg.project.path
            else "no rocmenv.toml (built-in profiles only)"
        )
        return [
            Finding(
                check="config",
                status="ok",
                detail=f"{where}; profiles: {', '.join(cfg.project.profile_names)}; default {cfg.profile.name}",
            )
        ]

    def lockfile() -> list[Finding]:
        from rocmenv.image.lock import read_lock

        cfg = state["config"]
        lock = read_lock(cfg.lockfile)
        state["lock"] = lock
        n = len(lock.profiles) + len(lock.references)
        if not cfg.lockfile.exists():
            return [
                Finding(
                    check="lockfile",
                    status="warn",
                    detail=f"{cfg.lockfile} does not exist",
                    hint="run `rocmenv pin` to pin your profiles",
                )
            ]
        return [
            Finding(check="lockfile", status="ok", detail=f"{cfg.lockfile}: {n} pinned image(s)")
        ]

    def engine() -> list[Finding]:
        from rocmenv.engine.select import open_engine
        from rocmenv.settings.choices import EngineName

        cfg = state.get("config")
        name: EngineName = cfg.engine if cfg else (args.engine or "auto")
        eng = open_engine(ctx, name)
        info = eng.ping()
        detail = f"{info.kind}: {info.name or 'engine'} {info.version} (API {info.api_version}, {info.os})"
        return [Finding(check="engine", status="ok", detail=redact(detail)), _cdi(info, cfg)]

    def registries() -> list[Finding]:
        from rocmenv.grammar.reference import parse
        from rocmenv.image.pinning import make_client

        cfg = state.get("config")
        if cfg is None:
            return []
        hosts: dict[str, None] = {}
        lock = state.get("lock")
        if lock is not None:
            for _, _, entry in lock.entries():
                hosts[entry.registry or parse(entry.repository).domain] = None
        with make_client(ctx, cfg) as client:
            for _, prof in cfg.project.profiles:
                if prof.image is not None:
                    for host in client.hosts_for(parse(prof.image.repository)):
                        hosts[host] = None
            out: list[Finding] = []
            for host in hosts:
                url = f"{client.scheme_for(host)}://{host}/v2/"
                try:
                    resp = client.transport.send_with_retries("GET", url, {}, "ping")
                except Exception as err:  # every failure is a finding
                    out.append(
                        Finding(
                            check=f"registry {host}",
                            status="fail",
                            detail=redact(str(err).splitlines()[0]),
                            hint="check the network, proxy, or [registry] mirrors",
                        )
                    )
                    continue
                if resp.status == 200:
                    out.append(
                        Finding(
                            check=f"registry {host}",
                            status="ok",
                            detail=f"{url} answers (no authentication needed)",
                        )
                    )
                elif resp.status == 401:
                    out.append(
                        Finding(
                            check=f"registry {host}",
                            status="ok",
                            detail=f"{url} answers and asks for authentication ({(resp.header('www-authenticate') or '').split(' ', 1)[0]})",
                        )
                    )
                else:
                    out.append(
                        Finding(
                            check=f"registry {host}",
                            status="fail",
                            detail=f"{url} answered HTTP {resp.status}",
                        )
                    )
            out += _pull_limits(client, lock, cfg)
        if not out:
            out.append(
                Finding(
                    check="registry",
                    status="warn",
                    detail="no profile or lock entry names an image: nothing to check",
                )
            )
        return out

    def gpus() -> list[Finding]:
        from rocmenv.spec.gpu import discover

        cfg = state.get("config")
        if cfg is None:
            return []
        inv = discover(cfg.host.sysfs_root, cfg.host.dev_root)
        if not inv.gpus:
            return [
                Finding(
                    check="gpus",
                    status="warn",
                    detail=f"no AMD GPUs under {cfg.host.sysfs_root} (fine for the cpu profile)",
                    hint="load amdgpu, or use --gpus none / the cpu profile",
                )
            ]
        targets = sorted({g.gfx for g in inv.gpus})
        return [
            Finding(
                check="gpus", status="ok", detail=f"{len(inv.gpus)} GPU(s): {', '.join(targets)}"
            )
        ]

    def shims() -> list[Finding]:
        from rocmenv.shims.catalogue import discover_shims

        found = discover_shims()
        return [
            Finding(
                check="shims",
                status="ok",
                detail=f"{len(found)} shim(s): {', '.join(s.name for s in found)}",
            )
        ]

    for name, body in (
        ("config", config),
        ("lockfile", lockfile),
        ("engine", engine),
        ("registry", registries),
        ("gpus", gpus),
        ("shims", shims),
    ):
        if name == "lockfile" and "config" not in state:
            continue
        findings += _guard(name, body)

    failed = any(f.status == "fail" for f in findings)
    if args.json:
        emit_json(ctx, {"ok": not failed, "checks": [f.__dict__ for f in findings]})
    else:
        mark = {"ok": "✓", "warn": "!", "fail": "✗"}
        for f in findings:
            emit(ctx, f"{mark[f.status]} {f.check}: {f.detail}")
            if f.hint and f.status != "ok":
                emit(ctx, f"    hint: {f.hint}")
    return 1 if failed else 0


def _cdi(info: Any, cfg: Any) -> Finding:
    """Whether the engine takes CDI device names (``gpu-devices = "cdi"``): a warning only
    when the selected profile uses them."""
    from rocmenv.spec.cdi import cdi_support

    ok, why = cdi_support(info.kind, info.version)
    wanted = cfg is not None and cfg.profile.gpu_devices == "cdi"
    return Finding(
        check="cdi",
        status="ok" if ok or not wanted else "warn",
        detail=("supported: " if ok else "not supported: ") + why,
        hint=None if ok else 'use gpu-devices = "nodes" (the default) with this engine',
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
