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
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import ROOT, machine_note, median_ms, rocmenv_cmd, table, time_once
from benchmarks._layers import export_revision
from benchmarks._tls_hub import STATE, hub_behind_delay, hub_seq

SKOPEO = ["skopeo", "--override-os", "linux", "--override-arch", "amd64"]


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


@dataclass(frozen=True, kw_only=True)
class Setup:
    """What every RTT's measurement shares: the options, the commands and the environments."""

    args: argparse.Namespace
    wanted: set[str]  # the cases asked for
    configs: list[str]  # "none" first, then the Docker configs to run rocmenv's cases under
    rocmenv: list[str]
    work: Path
    tokens: Path  # what "cold" empties: tokens only
    base_env: dict[str, str]
    baseline_env: dict[str, str] | None  # with --baseline: that revision on PYTHONPATH


@dataclass(kw_only=True)
class Results:
    """The rows of the two tables and the verdicts on the targets, over every RTT."""

    rows: list[list[str]] = field(default_factory=list)
    config_rows: list[list[str]] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    """The options, and the Docker configs (``none`` first) checked."""
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
    configs = [c for c in args.configs.split(",") if c]
    if not set(configs) <= {"none", "other", "host"} or "none" not in configs:
        parser.error("--configs: 'none' and any of 'other', 'host'")
    return args, configs


def main() -> int:
    args, configs = parse_args()
    wanted = set(args.cases.split(","))
    compileall.compile_dir(str(ROOT / "rocmenv"), quiet=1)
    load_before = os.getloadavg()
    if not (STATE / "tls/ca.crt").is_file():
        raise SystemExit(f"no test CA at {STATE}/tls/ca.crt: run scripts/setup.sh first")
    rocmenv = rocmenv_cmd()
    work = Path(tempfile.mkdtemp(prefix="rocmenv-bench-tls-"))
    cache = work / "cache"
    base_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(work),
        "SSL_CERT_FILE": str(STATE / "tls/ca.crt"),
        "XDG_CACHE_HOME": str(cache),
        "ROCMENV_TOKEN_CACHE": "1",
    }
    results = Results()
    try:
        baseline_env = None
        if args.baseline:
            tree = export_revision(args.baseline, work / "baseline")
            compileall.compile_dir(str(tree), quiet=1)
            baseline_env = {**base_env, "PYTHONPATH": str(tree)}
        setup = Setup(
            args=args,
            wanted=wanted,
            configs=configs,
            rocmenv=rocmenv,
            work=work,
            tokens=cache / "rocmenv" / "registry-tokens.json",
            base_env=base_env,
            baseline_env=baseline_env,
        )
        for rtt in (float(x) for x in args.rtt.split(",")):
            with hub_behind_delay(rtt / 2000, args.upstream) as (port, _):
                measure_at(setup, rtt, port, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_report(args, configs, results, load_before)
    return 0


def measure_at(setup: Setup, rtt: float, port: int, results: Results) -> None:
    """Every case at one RTT against the hub on ``port``: rows and verdicts into ``results``."""
    args, base_env = setup.args, setup.base_env
    host = f"registry.rocmenv.test:{port}"
    repo = f"{host}/{args.repo}"
    project = setup.work / f"project-{rtt:g}"
    project.mkdir()
    tags = pin_entries(setup, repo, project)
    cases, envs, ours_names = build_cases(setup, host, repo, tags)
    docker_imported: dict[str, bool] = {}
    for name in ours_names:
        setup.tokens.unlink(missing_ok=True)
        env = envs.get(name, base_env)
        docker_imported[name] = imports_docker(cases[name], env, project)
    floor = [sys.executable, "-c", FLOOR, "registry.rocmenv.test", str(port)]
    time_once(floor, base_env, project)  # warm
    trips, warm_trips = round_trips(setup, cases, envs, port, project)
    samples = sample_times(setup, cases, envs, ours_names, floor, project)
    med = {k: median_ms(v) for k, v in samples.items() if v}
    compared: list[tuple[str, str, str, float | None]] = [
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
        for config in setup.configs:
            name = ours if config == "none" else f"{ours} [{config}]"
            cold, warm = med[f"{name} (cold)"], med[f"{name} (warm)"]
            results.config_rows.append(
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
        results.rows.append(
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
            results.verdicts += verdicts_for(
                label, target, cold, warm, base, med["floor"], trips[ours], trips[theirs]
            )


def pin_entries(setup: Setup, repo: str, project: Path) -> list[str]:
    """The first ``--entries`` tags of ``repo``, pinned in ``project``'s lockfile."""
    args, rocmenv, base_env = setup.args, setup.rocmenv, setup.base_env
    listing = subprocess.run(
        [*rocmenv, "tags", "list", repo, "--json", "--all"],
        env=base_env,
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    )
    tags: list[str] = [t["tag"] for t in json.loads(listing.stdout)["tags"]][: args.entries]
    subprocess.run(
        [*rocmenv, "pin", *(f"{repo}:{t}" for t in tags)],
        env=base_env,
        cwd=project,
        capture_output=True,
        check=True,
    )
    return tags


def build_cases(
    setup: Setup, host: str, repo: str, tags: list[str]
) -> tuple[dict[str, list[str]], dict[str, dict[str, str]], list[str]]:
    """The commands by case name, the environments of those not run with ``base_env``, and
    the names of rocmenv's cases (the baseline's and those under a Docker config included)."""
    args, rocmenv = setup.args, setup.rocmenv
    envs: dict[str, dict[str, str]] = {}  # per case, when not base_env
    loop = " && ".join(f"skopeo inspect --raw docker://{repo}:{t} >/dev/null" for t in tags)
    cases: dict[str, list[str]] = {}
    if "tags" in setup.wanted:
        cases["rocmenv tags list"] = [*rocmenv, "tags", "list", repo, "--json"]
        cases["skopeo list-tags"] = [*SKOPEO, "list-tags", f"docker://{repo}"]
    if "digest" in setup.wanted:
        cases["rocmenv resolve --digest"] = [
            *rocmenv, "resolve", f"{repo}:{args.tag}", "--digest",
        ]  # fmt: skip
        cases["skopeo inspect --no-tags"] = [
            *SKOPEO, "inspect", "--no-tags", f"docker://{repo}:{args.tag}",
        ]  # fmt: skip
    if "validate" in setup.wanted:
        cases["rocmenv validate"] = [*rocmenv, "validate"]
        cases["skopeo loop"] = ["sh", "-c", loop]
    if args.baseline and setup.baseline_env is not None:
        for name in [n for n in cases if n.startswith("rocmenv ")]:
            twin = f"{args.baseline} {name.removeprefix('rocmenv ')}"
            cases[twin], envs[twin] = cases[name], setup.baseline_env
    ours_names = [n for n in cases if not n.startswith(("skopeo", "sh"))]
    for config in setup.configs[1:]:
        directory = docker_config(setup.work, config, host)
        for name in list(ours_names):
            twin = f"{name} [{config}]"
            cases[twin] = cases[name]
            envs[twin] = {**envs.get(name, setup.base_env), "DOCKER_CONFIG": str(directory)}
            ours_names.append(twin)
    return cases, envs, ours_names


def round_trips(
    setup: Setup,
    cases: dict[str, list[str]],
    envs: dict[str, dict[str, str]],
    port: int,
    project: Path,
) -> tuple[dict[str, int], dict[str, int]]:
    """Round trips of each case, once each: with a cold token cache, then warm (rocmenv)."""
    trips: dict[str, int] = {}
    warm_trips: dict[str, int] = {}
    for name, argv in cases.items():
        setup.tokens.unlink(missing_ok=True)
        before = hub_seq(port)
        time_once(argv, envs.get(name, setup.base_env), project)
        trips[name] = hub_seq(port) - before
        before = hub_seq(port)
        time_once(argv, envs.get(name, setup.base_env), project)
        warm_trips[name] = hub_seq(port) - before
    return trips, warm_trips


def sample_times(
    setup: Setup,
    cases: dict[str, list[str]],
    envs: dict[str, dict[str, str]],
    ours_names: list[str],
    floor: list[str],
    project: Path,
) -> dict[str, list[float]]:
    """``--runs`` interleaved runs of the floor and every case (rocmenv's cold, then warm)."""
    base_env = setup.base_env
    samples: dict[str, list[float]] = {f"{n} ({c})": [] for n in cases for c in ("cold", "warm")}
    samples["floor"] = []
    for _ in range(setup.args.runs):
        samples["floor"].append(time_once(floor, base_env, project))
        for name, argv in cases.items():
            env = envs.get(name, base_env)
            if name in ours_names:
                setup.tokens.unlink(missing_ok=True)
                samples[f"{name} (cold)"].append(time_once(argv, env, project))
                samples[f"{name} (warm)"].append(time_once(argv, env, project))
            else:
                samples[f"{name} (cold)"].append(time_once(argv, base_env, project))
    return samples


def verdicts_for(
    label: str,
    target: float | None,
    cold: float,
    warm: float,
    base: float,
    floor: float,
    trips: int,
    their_trips: int,
) -> list[str]:
    """The targets at 30 ms for one comparison: cold (where it has one), warm, round trips."""
    out = []
    if target is not None:
        out.append(
            f"{label} cold ≤ {target}x: {'met' if cold / base <= target else 'MISSED'} "
            f"({cold / base:.2f}x cold, {warm / base:.2f}x warm; "
            f"floor {floor:.0f} ms = {floor / base:.2f}x)"
        )
    out.append(f"{label} warm ≤ 0.5x: {'met' if warm / base <= 0.5 else 'MISSED'}")
    out.append(f"{label} round trips ≤ skopeo: {'met' if trips <= their_trips else 'MISSED'}")
    return out


def print_report(
    args: argparse.Namespace,
    configs: list[str],
    results: Results,
    load_before: tuple[float, float, float],
) -> None:
    """The tables, the machine's load before and after, and the verdicts."""
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
            results.rows,
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
                results.config_rows,
                ["RTT", "what", "config", "cold", "warm", "+ms cold", "imports docker-py"],
            )
        )
    for line in results.verdicts:
        print("target:", line)


if __name__ == "__main__":
    raise SystemExit(main())
