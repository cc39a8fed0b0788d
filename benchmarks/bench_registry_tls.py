"""Registry benchmark at a distance: rocmenv vs skopeo over TLS with token auth (issue 10).

    .venv/bin/python benchmarks/bench_registry_tls.py [--runs N] [--rtt 0,30] [--cases tags,digest,validate]
        [--baseline REV]

Set-up (needs the test bed of scripts/setup.sh: /etc/hosts names, the test CA, the open
registry with the ~2,850-tag set): a private tests/support/hub_server.py (TLS, anonymous
bearer tokens from auth.rocmenv.test, blob GETs redirected to cdn.rocmenv.test) behind
benchmarks/_delay_proxy.py, which adds RTT/2 in each direction; every host name (registry,
token realm, CDN) goes through the delay. Both tools trust the CA through SSL_CERT_FILE.

Cases (interleaved runs, median wall time; ratio < 1: rocmenv is faster), each at every RTT:
- tags list:  `rocmenv tags list REPO --json`         vs `skopeo list-tags`
- digest:     `rocmenv resolve REPO:TAG --digest`     vs `skopeo inspect --no-tags`
- validate:   `rocmenv validate` of 20 lock entries   vs 20 × `skopeo inspect --raw`
- with ``--baseline REV``: rocmenv's cases of that git revision too (exported, byte-compiled,
  run by the same interpreter), interleaved with the others;
- the floor: ``python -c "import ssl, socket, json"`` plus one TCP connection and TLS
  handshake with the registry, by the same interpreter: what any Python client pays.
- with a Docker config present (``--configs``, default ``none,other,host``): rocmenv's cases
  again with ``DOCKER_CONFIG`` naming a ``config.json`` as a CI runner has after
  ``docker/login-action`` — ``other``: logins for other hosts and a credential helper for
  another host (issue 33: docker-py was imported for it, 161–186 ms, before the file was
  known not to name the host); ``host``: a login for the registry itself (withheld from the
  token realm on another host name, so the token is still anonymous). A second table prints
  them side by side with ``none``, and whether the command imported docker-py (one cold run
  under ``PYTHONPROFILEIMPORTTIME``).
rocmenv with a cold token cache (its file, registry-tokens.json, deleted before each run; the
remembered challenges, registry-challenges.json — each registry's realm and service, no token —
are kept, as they are between a user's commands) and a warm one. Round trips are
counted by the hub server (HTTP requests, TLS handshakes not included). Everything is
byte-compiled first. Printed: medians with the interquartile range, ratios of medians, the
floor beside them, the load average before and after.
Targets at 30 ms (issue 20), cold token cache: tags ≤ 1.2× skopeo, digest ≤ 0.8×; warm
token cache ≤ 0.5×; never more round trips than skopeo.
"""

from __future__ import annotations

import argparse
import base64
import compileall
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ROOT, machine_note, median_ms, rocmenv_cmd, table, time_once
from benchmarks._delay_proxy import DelayProxy
from benchmarks._layers import export_revision

STATE = Path(os.environ.get("ROCMENV_TESTENV_STATE", "/var/lib/rocmenv-testenv"))
SKOPEO = ["skopeo", "--override-os", "linux", "--override-arch", "amd64"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def hub_behind_delay(one_way: float, upstream: str) -> Iterator[tuple[int, DelayProxy]]:
    hub_port = free_port()
    with DelayProxy(("127.0.0.1", hub_port), one_way) as proxy:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests/support/hub_server.py"),
                "--listen",
                f"127.0.0.1:{hub_port}",
                "--upstream",
                upstream,
                "--cert",
                str(STATE / "tls/server.crt"),
                "--key",
                str(STATE / "tls/server.key"),
                "--public-port",
                str(proxy.port),
            ]
        )
        try:
            for _ in range(100):
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", hub_port)),
                ):
                    break
                time.sleep(0.05)
            yield proxy.port, proxy
        finally:
            proc.terminate()
            proc.wait(10)


def hub_seq(port: int) -> int:
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(STATE / "tls/ca.crt"))
    with urllib.request.urlopen(
        f"https://registry.rocmenv.test:{port}/_hub/seq", context=ctx, timeout=30
    ) as resp:
        seq: int = json.loads(resp.read())["seq"]
        return seq


FLOOR = (
    "import ssl, socket, json, sys; host, port = sys.argv[1], int(sys.argv[2]); "
    "ctx = ssl.create_default_context(); "
    "ctx.wrap_socket(socket.create_connection((host, port)), server_hostname=host).close()"
)


def docker_config(work: Path, name: str, host: str) -> Path:
    """A Docker config directory: ``other`` names other hosts only (a login, an empty entry
    kept by a helper, a helper that is never run); ``host`` has a login for ``host``."""
    directory = work / f"docker-{name}"
    directory.mkdir(exist_ok=True)
    login = base64.b64encode(b"bench:bench-secret").decode()
    auths: dict[str, object] = {"ghcr.io": {"auth": login}, "quay.io": {}}
    if name == "host":
        auths = {host: {"auth": login}}
    config = {"auths": auths, "credHelpers": {"quay.io": "rocmenv-bench-never-run"}}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def imports_docker(argv: list[str], env: dict[str, str], cwd: Path) -> bool:
    """Whether one run of ``argv`` imported docker-py (``-X importtime``'s report)."""
    done = subprocess.run(
        argv, env={**env, "PYTHONPROFILEIMPORTTIME": "1"}, cwd=cwd,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True,
    )  # fmt: skip
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    return any(n == "docker" or n.startswith("docker.") for n in names)


def spread(samples: list[float]) -> str:
    """Median and interquartile range in ms."""
    ms = sorted(s * 1000 for s in samples)
    if len(ms) < 4:
        return f"{statistics.median(ms):.0f} ({ms[0]:.0f}-{ms[-1]:.0f})"
    q1, q2, q3 = statistics.quantiles(ms, n=4)
    return f"{q2:.0f} ({q1:.0f}-{q3:.0f})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rtt", default="0,30", help="round-trip times in ms, comma-separated")
    parser.add_argument("--upstream", default="127.0.0.1:5000")
    parser.add_argument("--repo", default="rocm/sgl-dev")
    parser.add_argument("--tag", default="v0.5.8-rocm700-mi30x-20260215")
    parser.add_argument("--entries", type=int, default=20)
    parser.add_argument("--cases", default="tags,digest,validate", help="comma-separated")
    parser.add_argument("--baseline", metavar="REV", help="also time this git revision")
    parser.add_argument(
        "--configs",
        default="none,other,host",
        help="Docker configs to run rocmenv's cases under: none, other (names other hosts), "
        "host (names the registry); comma-separated",
    )
    args = parser.parse_args()
    wanted = set(args.cases.split(","))
    configs = [c for c in args.configs.split(",") if c]
    if not set(configs) <= {"none", "other", "host"} or "none" not in configs:
        parser.error("--configs: 'none' and any of 'other', 'host'")
    compileall.compile_dir(str(ROOT / "rocmenv"), quiet=1)
    load_before = os.getloadavg()
    if not (STATE / "tls/ca.crt").is_file():
        raise SystemExit(f"no test CA at {STATE}/tls/ca.crt: run scripts/setup.sh first")
    rocmenv = rocmenv_cmd()
    work = Path(tempfile.mkdtemp(prefix="rocmenv-bench-tls-"))
    cache = work / "cache"
    tokens = cache / "rocmenv" / "registry-tokens.json"  # what "cold" empties: tokens only
    base_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(work),
        "SSL_CERT_FILE": str(STATE / "tls/ca.crt"),
        "XDG_CACHE_HOME": str(cache),
        "ROCMENV_TOKEN_CACHE": "1",
    }
    rows = []
    config_rows = []
    verdicts = []
    envs: dict[str, dict[str, str]] = {}  # per case, when not base_env
    try:
        if args.baseline:
            tree = export_revision(args.baseline, work / "baseline")
            compileall.compile_dir(str(tree), quiet=1)
            baseline_env = {**base_env, "PYTHONPATH": str(tree)}
        for rtt in (float(x) for x in args.rtt.split(",")):
            with hub_behind_delay(rtt / 2000, args.upstream) as (port, _):
                host = f"registry.rocmenv.test:{port}"
                repo = f"{host}/{args.repo}"
                project = work / f"project-{rtt:g}"
                project.mkdir()
                listing = subprocess.run(
                    [*rocmenv, "tags", "list", repo, "--json", "--all"],
                    env=base_env,
                    cwd=project,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                tags = [t["tag"] for t in json.loads(listing.stdout)["tags"]][: args.entries]
                subprocess.run(
                    [*rocmenv, "pin", *(f"{repo}:{t}" for t in tags)],
                    env=base_env,
                    cwd=project,
                    capture_output=True,
                    check=True,
                )
                loop = " && ".join(
                    f"skopeo inspect --raw docker://{repo}:{t} >/dev/null" for t in tags
                )
                cases: dict[str, list[str]] = {}
                if "tags" in wanted:
                    cases["rocmenv tags list"] = [*rocmenv, "tags", "list", repo, "--json"]
                    cases["skopeo list-tags"] = [*SKOPEO, "list-tags", f"docker://{repo}"]
                if "digest" in wanted:
                    cases["rocmenv resolve --digest"] = [
                        *rocmenv, "resolve", f"{repo}:{args.tag}", "--digest",
                    ]  # fmt: skip
                    cases["skopeo inspect --no-tags"] = [
                        *SKOPEO, "inspect", "--no-tags", f"docker://{repo}:{args.tag}",
                    ]  # fmt: skip
                if "validate" in wanted:
                    cases["rocmenv validate"] = [*rocmenv, "validate"]
                    cases["skopeo loop"] = ["sh", "-c", loop]
                if args.baseline:
                    for name in [n for n in cases if n.startswith("rocmenv ")]:
                        twin = f"{args.baseline} {name.removeprefix('rocmenv ')}"
                        cases[twin], envs[twin] = cases[name], baseline_env
                ours_names = [n for n in cases if not n.startswith(("skopeo", "sh"))]
                for config in configs[1:]:
                    directory = docker_config(work, config, host)
                    for name in list(ours_names):
                        twin = f"{name} [{config}]"
                        cases[twin] = cases[name]
                        envs[twin] = {**envs.get(name, base_env), "DOCKER_CONFIG": str(directory)}
                        ours_names.append(twin)
                docker_imported: dict[str, bool] = {}
                for name in ours_names:
                    tokens.unlink(missing_ok=True)
                    env = envs.get(name, base_env)
                    docker_imported[name] = imports_docker(cases[name], env, project)
                floor = [sys.executable, "-c", FLOOR, "registry.rocmenv.test", str(port)]
                time_once(floor, base_env, project)  # warm
                # round trips, once each: cold token cache, then warm (rocmenv)
                trips: dict[str, int] = {}
                warm_trips: dict[str, int] = {}
                for name, argv in cases.items():
                    tokens.unlink(missing_ok=True)
                    before = hub_seq(port)
                    time_once(argv, envs.get(name, base_env), project)
                    trips[name] = hub_seq(port) - before
                    before = hub_seq(port)
                    time_once(argv, envs.get(name, base_env), project)
                    warm_trips[name] = hub_seq(port) - before
                samples: dict[str, list[float]] = {
                    f"{n} ({c})": [] for n in cases for c in ("cold", "warm")
                }
                samples["floor"] = []
                for _ in range(args.runs):
                    samples["floor"].append(time_once(floor, base_env, project))
                    for name, argv in cases.items():
                        env = envs.get(name, base_env)
                        if name in ours_names:
                            tokens.unlink(missing_ok=True)
                            samples[f"{name} (cold)"].append(time_once(argv, env, project))
                            samples[f"{name} (warm)"].append(time_once(argv, env, project))
                        else:
                            samples[f"{name} (cold)"].append(time_once(argv, base_env, project))
                med = {k: median_ms(v) for k, v in samples.items() if v}
                compared = [
                    ("tags list", "rocmenv tags list", "skopeo list-tags", 1.2),
                    ("digest lookup", "rocmenv resolve --digest", "skopeo inspect --no-tags", 0.8),
                    (f"validate {len(tags)}", "rocmenv validate", "skopeo loop", None),
                ]
                if args.baseline:
                    compared += [
                        (f"{label} ({args.baseline})", f"{args.baseline} {ours[8:]}", theirs, None)
                        for label, ours, theirs, _ in list(compared)
                    ]
                for label, ours, _theirs, _ in compared:
                    if ours not in cases:
                        continue
                    for config in configs:
                        name = ours if config == "none" else f"{ours} [{config}]"
                        cold, warm = med[f"{name} (cold)"], med[f"{name} (warm)"]
                        config_rows.append(
                            [
                                f"{rtt:g} ms",
                                label,
                                config,
                                spread(samples[f"{name} (cold)"]),
                                spread(samples[f"{name} (warm)"]),
                                f"{cold - med[f'{ours} (cold)']:+.0f}",
                                "yes" if docker_imported[name] else "no",
                            ]
                        )
                for label, ours, theirs, target in compared:
                    if ours not in cases:
                        continue
                    base = med[f"{theirs} (cold)"]
                    cold, warm = med[f"{ours} (cold)"], med[f"{ours} (warm)"]
                    rows.append(
                        [
                            f"{rtt:g} ms",
                            label,
                            spread(samples[f"{ours} (cold)"]),
                            spread(samples[f"{ours} (warm)"]),
                            spread(samples[f"{theirs} (cold)"]),
                            f"{cold / base:.2f}x",
                            f"{warm / base:.2f}x",
                            spread(samples["floor"]),
                            f"{trips[ours]} ({warm_trips[ours]} warm) vs {trips[theirs]}",
                        ]
                    )
                    if rtt == 30 and not ours.startswith(str(args.baseline)):
                        if target is not None:
                            verdicts.append(
                                f"{label} cold ≤ {target}x: {'met' if cold / base <= target else 'MISSED'} "
                                f"({cold / base:.2f}x cold, {warm / base:.2f}x warm; "
                                f"floor {med['floor']:.0f} ms = {med['floor'] / base:.2f}x)"
                            )
                        verdicts.append(
                            f"{label} warm ≤ 0.5x: {'met' if warm / base <= 0.5 else 'MISSED'}"
                        )
                        verdicts.append(
                            f"{label} round trips ≤ skopeo: "
                            f"{'met' if trips[ours] <= trips[theirs] else 'MISSED'}"
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"registry over TLS + token auth behind a delay proxy; {args.runs} interleaved runs, "
        "median wall ms (interquartile range); round trips = HTTP requests seen by the server"
    )
    load_after = os.getloadavg()
    print(machine_note() + f"; before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(
        "cold = no token cached (registry-tokens.json deleted before the run); the registry's "
        "remembered challenge (registry-challenges.json: realm and service, no token) is kept"
    )
    print(
        table(
            rows,
            [
                "RTT",
                "what",
                "rocmenv cold",
                "rocmenv warm",
                "skopeo",
                "cold ratio",
                "warm ratio",
                "floor",
                "round trips",
            ],
        )
    )
    if len(configs) > 1:
        print(
            "\nwith a Docker config present (DOCKER_CONFIG): none; other = logins and a helper "
            "for other hosts only; host = a login for the registry (withheld from its token "
            "realm on another host name); +ms = cold median minus the same command's without one"
        )
        print(
            table(
                config_rows,
                ["RTT", "what", "config", "cold", "warm", "+ms cold", "imports docker-py"],
            )
        )
    for line in verdicts:
        print("target:", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
