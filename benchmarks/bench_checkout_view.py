"""Untrusted mode's copy-on-write checkout (issue 31) against today's writable bind mount,
on a checkout the size of radixark/miles (~5,000 files, ~50 MB, committed: a ``.git`` as
big again), side by side, interleaved, median wall time.

Per engine (``docker-api``, ``docker-cli``, ``podman``), ``rocmenv run`` end to end:

* ``bind``: trusted (``ROCMENV_UNTRUSTED=0``): the checkout bind-mounted writable;
* ``view``: untrusted: the checkout a copy-on-write view (Docker: an overlay volume over two
  scratch volumes created and removed around the container; podman: ``-v SRC:DST:O``), plus
  what else untrusted mode does (the caps, the second-line sweep of the checkout);

each with three commands: ``start`` (``true``: the container's start and removal),
``test`` (a stand-in test run: read every file of the checkout, write 200 files of 20 KiB
into it, as a build or a test's caches would) and ``first-write`` (append a line to every
file of the checkout: in the view, each is copied up whole first — the overlay's cost at its
worst). And the mechanism alone, without rocmenv:
``docker run`` with a bind vs with the overlay volume (its scratch volumes created and
removed by the docker CLI), ``podman run -v`` vs ``-v …:O``.

    .venv/bin/python benchmarks/bench_checkout_view.py [--rounds 5] [--files 5000] [--kib 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, machine_note, median_ms, rocmenv_cmd, table

TEST = (
    "tar cf - --exclude=./.git . | wc -c >/dev/null && mkdir -p build && "
    "i=0; while [ $i -lt 200 ]; do head -c 20480 /dev/urandom > build/o$i; i=$((i+1)); done"
)
#: The first write of every file the checkout has (a formatter, a build that rewrites its
#: sources): in the view each one is copied up whole before it is written.
FIRST_WRITE = (  # no single quote: the engine-alone cases quote the command with them
    'find . -path ./.git -prune -o -type f -name "*.py" -print | '
    'while read -r f; do echo >> "$f"; done'
)
ENGINES = ("docker-api", "docker-cli", "podman")


def _image() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.testenv import load_family

    return load_family()["demo"].ref


def make_checkout(root: Path, files: int, kib: int, image: str) -> None:
    """``files`` files of about ``kib`` KiB (half random, half text: a source tree's mix) in
    a few hundred directories, committed; a profile the untrusted policy allows."""
    root.mkdir(parents=True)
    for i in range(files):
        sub = root / f"pkg{i % 40:02d}" / f"mod{i % 300:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        body = os.urandom(kib * 512).hex() if i % 2 else "x = 1\n" * (kib * 170)
        (sub / f"f{i}.py").write_text(body[: kib * 1024])
    (root / "rocmenv.toml").write_text(
        f'default-profile = "b"\n[profiles.b]\nextends = "cpu"\nimage = "{image}"\n'
        'mounts = []\nshm-size = "64m"\n'
    )
    git = ["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "tree"], check=True)


def docker_root() -> str:
    info = subprocess.run(["docker", "info", "--format", "{{json .DockerRootDir}}"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return str(json.loads(info.stdout))


def mechanism_cases(co: Path, image: str, command: str) -> dict[str, list[str]]:
    """The engines' own mounts, no rocmenv: a bind vs the copy-on-write view."""
    data = f"{docker_root()}/volumes"
    up, work = "rocmenv-bench-view-upper", "rocmenv-bench-view-work"
    opt = f"o=lowerdir={co},upperdir={data}/{up}/_data,workdir={data}/{work}/_data"
    overlay = (
        f"docker volume create {up} >/dev/null && docker volume create {work} >/dev/null && "
        f"docker run --rm --network=none -w {co} --mount 'type=volume,target={co},"
        f'volume-driver=local,volume-opt=type=overlay,volume-opt=device=overlay,"volume-opt={opt}"'
        f"' {image} sh -c '{command}'; rc=$?; docker volume rm {up} {work} >/dev/null; exit $rc"
    )
    cases = {
        "alone docker bind": ["docker", "run", "--rm", "--network=none", "-w", str(co),
                        f"--mount=type=bind,source={co},target={co}", image, "sh", "-c", command],
        "alone docker view": ["sh", "-c", overlay],
    }  # fmt: skip
    if shutil.which("podman"):
        run = ["podman", "run", "--rm", "--network=none", "--pull=never", "-w", str(co)]
        cases["alone podman bind"] = [*run, "-v", f"{co}:{co}", image, "sh", "-c", command]
        cases["alone podman view"] = [*run, "-v", f"{co}:{co}:O", image, "sh", "-c", command]
    return cases


def scratch_cost(co: Path, rounds: int) -> list[list[str]]:
    """What rocmenv adds per run on Docker, alone: making and removing the two scratch
    volumes (``overlay.prepare`` + ``release``), per adapter."""
    import statistics
    import time

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from rocmenv.container.labels import Identity, run_labels
    from rocmenv.container.runspec import BindMount, RunSpec
    from rocmenv.context import Context
    from rocmenv.engine.overlay import prepare, release
    from rocmenv.engine.select import make_engine

    rows = []
    for kind in ("docker-api", "docker-cli"):
        engine = make_engine(kind, Context())  # type: ignore[arg-type]
        took = []
        for _ in range(rounds * 3):
            labels = run_labels(profile="bench", identity=Identity.current(), image_digest=None)
            view = BindMount(source=str(co), target=str(co), kind="overlay")
            spec = RunSpec(image="x", mounts=(view,), labels=tuple(sorted(labels.items())))
            start = time.perf_counter()
            release(engine, prepare(engine, spec).volumes)
            took.append(time.perf_counter() - start)
        rows.append([kind, f"{statistics.median(took) * 1000:.0f}"])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--kib", type=int, default=10)
    parser.add_argument("--image", default=None)
    parser.add_argument("--engines", default=",".join(ENGINES))
    args = parser.parse_args()
    image = args.image or _image()
    engines = [e for e in args.engines.split(",") if e != "podman" or shutil.which("podman")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMENV_")}
    env.update({"ROCMENV_SITE_CONFIG": "", "ROCMENV_SHIMS_QUIET": "1",
                "ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000"})  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rocmenv-bench-view-") as scratch:
        co = Path(scratch) / "checkout"
        make_checkout(co, args.files, args.kib, image)
        rows = []
        for what, command in (("start", "true"), ("test", TEST), ("first-write", FIRST_WRITE)):
            cases: dict[str, list[str]] = {}
            for engine in engines:
                run = [*rocmenv_cmd(), "run", "--engine", engine, "--gpus", "none",
                       "--pull", "never", "--no-shims", "--", "sh", "-c", command]  # fmt: skip
                cases[f"{engine} bind"] = ["env", "ROCMENV_UNTRUSTED=0", *run]
                cases[f"{engine} view"] = ["env", "ROCMENV_UNTRUSTED=1", *run]
            cases.update(mechanism_cases(co, image, command))
            samples = interleaved(cases, args.rounds, env=env, cwd=co)
            subprocess.run(["git", "-C", str(co), "clean", "-qfdx"], check=True)  # build/
            subprocess.run(["git", "-C", str(co), "checkout", "-q", "--", "."], check=True)
            pairs = [(f"{e} bind", f"{e} view") for e in engines] + [
                (f"alone {e} bind", f"alone {e} view") for e in ("docker", "podman")
            ]  # fmt: skip
            for base, other in pairs:
                if base in samples and other in samples:
                    b, o = median_ms(samples[base]), median_ms(samples[other])
                    mode, engine = ("engine alone", base.split()[1]) if base.startswith(
                        "alone") else ("rocmenv run", base.split()[0])  # fmt: skip
                    rows.append([what, mode, engine, f"{b:.0f}", f"{o:.0f}", f"{o / b:.2f}x"])
        du = [subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True,
                             check=True).stdout.split()[0] for path in (co, co / ".git")]  # fmt: skip
        print(f"checkout: {args.files} files, {du[0]} in all, .git {du[1]}; "
              f"{args.rounds} interleaved rounds")  # fmt: skip
        print(table(rows, ["command", "measured", "engine", "bind ms", "view ms", "view/bind"]))
        print("\nthe scratch volumes alone (create both, remove both), median:")
        print(table(scratch_cost(co, args.rounds), ["adapter", "ms"]))
        print(machine_note())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
