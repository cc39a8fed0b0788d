#!/usr/bin/env python3
"""scripts/mutation.py [GROUP ...] [--list] [--jobs N] [--show] — a mutation run over the modules
that guard users (issue 21), with mutmut (https://github.com/boxed/mutmut).

Each group names the modules it mutates and the tests that cover them (unit tests, plus the
integration tests that exercise a path where a unit test cannot). A group runs in its own
copy of the repository under ``$ROCMENV_MUTATION_DIR`` (default ``/tmp/rocmenv-mutation``):
mutmut writes ``mutants/`` there, never into the checkout. The script prints the score per
module and lists every surviving mutant (``--show``: with its diff); the summary is also
written to ``<dir>/summary.json``.

A mutant the tests time out on (a loop that no longer ends) or crash on (a segfault) counts
as killed: the tests detected it, as PIT and Stryker count it.

Mutants on a line marked ``# pragma: no mutate`` are not generated: the project marks the
equivalent ones that way, with the reason in a comment beside it.

Not part of CI (minutes to hours on two cores): ``make mutation`` runs every group;
``--only PATTERN`` runs a slice of one (``registry --only 'rocmenv.registry.auth.*'``). Integration
groups need the test environment of ``scripts/setup.sh`` (registries, dockerd).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"

_TLS = "tests/integration/registry/test_registry_tls.py::"
REGISTRY_INTEGRATION = [
    "tests/integration/registry/test_registry.py",
    "tests/integration/registry/test_blobs.py",
    # in process, against the TLS hub: the handshake made ahead, insecure hosts, no-proxy
    "tests/integration/registry/test_connect_tls.py",
    "tests/integration/registry/test_transport_tls.py",
    *(_TLS + t for t in ("test_blob_redirect_to_the_cdn_carries_no_credentials",
                         "test_ratelimit_headers_are_read",
                         "test_429_without_retry_after_is_retried_with_backoff",
                         "test_realm_on_another_host_is_not_the_credentials_own")),
]  # fmt: skip

# group -> (modules to mutate, tests that cover them)
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "settings": (["rocmenv/settings/resolve.py"], ["tests/unit/settings"]),
    "guard": (
        ["rocmenv/container/guard.py", "rocmenv/container/hostpaths.py"],
        ["tests/unit/container", "tests/unit/settings"],
    ),
    "lock": (["rocmenv/image/lock.py"], ["tests/unit/image/test_lock.py"]),
    "grammar": (
        ["rocmenv/grammar/reference.py", "rocmenv/grammar/tags.py"],
        ["tests/unit/grammar"],
    ),
    "redact": (
        ["rocmenv/redact.py"],
        ["tests/unit/test_redact.py", "tests/unit/bootstrap/test_redaction.py"],
    ),
    "registry": (
        [
            "rocmenv/registry/transport.py",
            "rocmenv/registry/auth.py",
            "rocmenv/registry/client.py",
            "rocmenv/registry/blobs.py",
            "rocmenv/registry/challenge_cache.py",
        ],
        # the unit tests, plus the in-process integration tests against the real Distribution
        # registry (token auth, blobs, retries) and the TLS hub's (a blob's CDN redirect, rate
        # limits). Not the hostile-server tests nor the rest of the TLS file: they run rocmenv
        # as a subprocess, which mutmut cannot see, and take minutes per mutant.
        ["tests/unit/registry", *REGISTRY_INTEGRATION],
    ),
    "suite": (
        [
            "rocmenv/suite/plan.py",
            "rocmenv/suite/balance.py",
            "rocmenv/suite/packer.py",
            "rocmenv/suite/drive.py",
            "rocmenv/suite/allocation.py",
            "rocmenv/suite/slurm.py",
        ],
        ["tests/unit/suite", "tests/unit/container"],
    ),
    # issue 34: the modules a second hand-planted audit found gaps in, each with the unit
    # tests that decide its behaviour (the integration twins run rocmenv as a subprocess,
    # which mutmut cannot see)
    "gc": (["rocmenv/engine/gc.py"], ["tests/unit/engine/test_gc.py"]),
    "planted": (
        ["rocmenv/run/planted.py"],
        ["tests/unit/run/test_planted.py", "tests/unit/run/test_planted_policy.py"],
    ),
    "dockerflags": (["rocmenv/adopt/dockerflags.py"], ["tests/unit/adopt"]),
    "registered": (
        ["rocmenv/suite/registered.py"],
        [
            "tests/unit/suite/test_registered.py",
            "tests/unit/suite/test_registered_disabled.py",
            "tests/unit/suite/test_registered_reading.py",
            "tests/unit/suite/test_discovery.py",
        ],
    ),
    "fetch": (["rocmenv/contents/fetch.py"], ["tests/unit/contents"]),
    # tag resolution's registry side: the tag-list pages read (which tag matches is the
    # grammar group's, rocmenv/grammar/tags.py)
    "resolve": (
        ["rocmenv/registry/tag_list.py"],
        ["tests/unit/registry/test_tag_pages.py", "tests/unit/registry/test_client.py"],
    ),
    "policy": (["rocmenv/settings/policy.py"], ["tests/unit/settings"]),  # test_policy.py
    # In-process tests only: a mutant copies mutmut's trampoline into the bundle, which the
    # interpreters test_launcher.py starts cannot import (and mutmut cannot see them anyway).
    "launcher": (
        ["rocmenv/launcher/_runtime.py", "rocmenv/launcher/sitecustomize.py"],
        [
            "tests/unit/launcher/test_runtime.py",
            "tests/unit/launcher/test_sitecustomize.py",
            "tests/unit/shims/test_specifiers.py",
        ],
    ),
}

# group -> the mutants it runs and scores (fnmatch on mutmut's names), where a module is only
# partly in scope: slurm.py's submitting and waiting (srun, scancel, squeue) are the Slurm
# integration tests' (tests/integration/suite); its GPU and argv mapping is the unit tests'.
SLURM_MAPPING = ("x_slurm_pool", "x_gpu_args", "x_time_limit", "x_node_gpu_capacity",
                 "x\u01c1SlurmBackend\u01c1argv", "x__markers", "x_gpu_count", "x__node_command",
                 "x_job_args", "x_render_sbatch")  # fmt: skip
# allocation.py's exec_on_node runs the test's container: the Slurm integration tests'.
ALLOCATION = ("x__expand", "x_parse_gres_conf", "x_default_gres_conf", "x_allocated_indices",
              "x_map_allocation", "x_check_access", "x_allocated_gpus", "x_describe")  # fmt: skip
ONLY: dict[str, list[str]] = {
    "suite": [
        *(f"rocmenv.suite.{m}.*" for m in ("plan", "balance", "packer", "drive")),
        *(f"rocmenv.suite.allocation.{f}__mutmut_*" for f in ALLOCATION),
        *(f"rocmenv.suite.slurm.{f}__mutmut_*" for f in SLURM_MAPPING),
    ],
}


def copy_repo(target: Path) -> None:
    """The tracked files (and the untracked ones not ignored) into ``target``."""
    if target.exists():
        shutil.rmtree(target)
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.split(b"\0")  # fmt: skip
    for name in filter(None, files):
        src = REPO / name.decode()
        if src.is_file():
            dst = target / name.decode()
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)


def _top_level(target: Path) -> set[str]:
    return {p.name for p in target.iterdir()}


def configure(target: Path, modules: list[str], tests: list[str]) -> None:
    pyproject = target / "pyproject.toml"
    lines = [
        "",
        "[tool.mutmut]",
        'source_paths = ["rocmenv"]',
        # the rest of the checkout too: tests read README.md, docs/, shims/, images/, examples/
        f"also_copy = {json.dumps(sorted(_top_level(target) - {'rocmenv', 'tests', 'mutants'}))}",
        f"only_mutate = {json.dumps(modules)}",
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}",
        # a hung mutant is stopped after 10x the CPU time its tests took (mutmut's default, 30x,
        # spends minutes of two shared cores on each loop that no longer ends)
        "timeout_multiplier = 5.0",
        # hypothesis derandomised: a mutant is judged by the same examples every time
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "--hypothesis-seed=0"]',
    ]
    pyproject.write_text(pyproject.read_text() + "\n".join(lines) + "\n")
    conftest = target / "tests" / "conftest.py"
    conftest.write_text(conftest.read_text() + FASTEST_FIRST)


# Appended to the copy's tests/conftest.py (never the checkout's). mutmut runs a mutant's tests
# with -x but in no useful order, so a mutant the unit tests kill in 50 ms could first wait a
# minute for the registry's integration tests. This runs them fastest first, by the durations of
# mutmut's own clean run (mutants/mutmut-stats.json; absent during that run: order unchanged).
FASTEST_FIRST = """

_project_modifyitems = pytest_collection_modifyitems


def pytest_collection_modifyitems(config, items):
    _project_modifyitems(config, items)
    import json as _json

    try:
        with open("mutmut-stats.json") as _f:
            _took = _json.load(_f)["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return
    items.sort(key=lambda item: _took.get(item.nodeid, float("inf")))
"""


@dataclass
class Row:
    killed: int = 0
    survived: int = 0
    other: int = 0  # suspicious, no tests: counted, not killed
    survivors: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.killed + self.survived + self.other

    @property
    def score(self) -> float:
        return 100.0 * self.killed / self.total if self.total else 100.0


def run_group(name: str, base: Path, jobs: int, only: list[str] | None = None) -> dict[str, Row]:
    modules, tests = GROUPS[name]
    target = base / name
    copy_repo(target)
    configure(target, modules, tests)
    env = {**os.environ, "ROCMENV_REQUIRE_ENGINE": os.environ.get("ROCMENV_REQUIRE_ENGINE", "1")}
    log = base / f"{name}.log"
    t0 = time.monotonic()
    only = only or ONLY.get(name, [])
    with log.open("w") as out:
        subprocess.run(
            [str(VENV_BIN / "mutmut"), "run", "--max-children", str(jobs), *only],
            cwd=target, stdout=out, stderr=subprocess.STDOUT, env=env, check=False,
        )  # fmt: skip
    results = subprocess.run(
        [str(VENV_BIN / "mutmut"), "results", "--all", "true"],
        cwd=target, capture_output=True, text=True, env=env, check=False,
    ).stdout  # fmt: skip
    per_module: dict[str, Row] = {}
    for line in results.splitlines():
        key, _, status = line.strip().rpartition(": ")
        if not key or (only and not any(fnmatch.fnmatchcase(key, pat) for pat in only)):
            continue
        module = key.split(".x_", 1)[0].split(".x\u01c1", 1)[0]
        row = per_module.setdefault(module, Row())
        # a timeout is a mutant the tests hang on, a segfault one they crash on (a loop that
        # fills memory until the process dies): detected, as PIT and Stryker count them
        if status in ("killed", "timeout", "segfault"):
            row.killed += 1
        elif status == "survived":
            row.survived += 1
            row.survivors.append(key)
        else:
            row.other += 1
    print(f"== {name}: {time.monotonic() - t0:.0f}s (log {log})")
    return per_module


def show(target: Path, key: str) -> str:
    return subprocess.run(
        [str(VENV_BIN / "mutmut"), "show", key], cwd=target, capture_output=True, text=True,
        check=False,
    ).stdout  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "groups", nargs="*", metavar="GROUP", help=f"default: all ({', '.join(GROUPS)})"
    )
    parser.add_argument("--list", action="store_true", help="list the groups and exit")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="mutmut children")
    parser.add_argument("--show", action="store_true", help="print each survivor's diff")
    parser.add_argument(
        "--only",
        action="append",
        metavar="PATTERN",
        help="run and score only these mutants (mutmut names, fnmatch; repeatable), e.g. "
        "'rocmenv.registry.auth.*': a slice of a long group",
    )
    args = parser.parse_args()
    if args.list:
        for name, (modules, tests) in GROUPS.items():
            print(f"{name}: {' '.join(modules)}  <-  {' '.join(tests)}")
        return 0
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        parser.error(f"unknown group(s): {', '.join(unknown)} (known: {', '.join(GROUPS)})")
    base = Path(os.environ.get("ROCMENV_MUTATION_DIR", "/tmp/rocmenv-mutation"))
    base.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Row] = {}
    for name in args.groups or list(GROUPS):
        for module, row in run_group(name, base, args.jobs, args.only).items():
            summary[module] = row
            if args.show:
                for key in row.survivors:
                    print(show(base / name, key))
    doc = {m: {**asdict(r), "score": round(r.score, 1)} for m, r in summary.items()}
    (base / "summary.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    print(f"\n{'module':<40} {'mutants':>8} {'killed':>7} {'survived':>9} {'score':>7}")
    for module, row in sorted(summary.items()):
        print(f"{module:<40} {row.total:>8} {row.killed:>7} {row.survived:>9} {row.score:>6.1f}%")
    print("\nsurviving mutants (`mutmut show NAME` in the group's directory for the diff):")
    for _module, row in sorted(summary.items()):
        for key in row.survivors:
            print(f"  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
