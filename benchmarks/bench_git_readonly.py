"""Untrusted mode's ``.git``: a read-only bind over the writable checkout vs a clean copy.

Three ways to start a no-op container on a generated checkout (``--files`` files of
``--kib`` KiB of random bytes, committed, so ``.git`` is as big as the tree), interleaved,
median wall time:

* ``plain``: the checkout bind-mounted writable (trusted mode);
* ``ro-git``: the same plus ``.git`` bind-mounted read-only over it (what rocmenv does);
* ``clean-copy``: ``git clone --local --no-hardlinks`` of the checkout into a scratch
  directory, mounted instead (the alternative), then removed.

    .venv/bin/python benchmarks/bench_git_readonly.py [--rounds 7] [--files 2000] [--kib 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, machine_note, median_ms, table


def _image() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.testenv import load_family

    return load_family()["demo"].ref


def make_checkout(root: Path, files: int, kib: int) -> None:
    root.mkdir(parents=True)
    for i in range(files):
        sub = root / f"d{i % 50:02d}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i}.bin").write_bytes(os.urandom(kib * 1024))
    git = ["git", "-C", str(root), "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "tree"], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--kib", type=int, default=20)
    parser.add_argument("--image", default=None)
    args = parser.parse_args()
    image = args.image or _image()
    with tempfile.TemporaryDirectory(prefix="rocmenv-bench-git-") as scratch:
        co = Path(scratch) / "checkout"
        make_checkout(co, args.files, args.kib)
        copy = Path(scratch) / "copy"
        run = ["docker", "run", "--rm", "--network=none"]
        clone_and_run = (
            f"git clone -q --local --no-hardlinks {co} {copy} && "
            f"docker run --rm --network=none --mount type=bind,source={copy},target={co} "
            f"{image} true; rc=$?; rm -rf {copy}; exit $rc"
        )
        cases = {
            "plain": [*run, f"--mount=type=bind,source={co},target={co}", image, "true"],
            "ro-git": [
                *run,
                f"--mount=type=bind,source={co},target={co}",
                f"--mount=type=bind,source={co}/.git,target={co}/.git,readonly",
                image,
                "true",
            ],
            "clean-copy": ["sh", "-c", clone_and_run],
        }
        samples = interleaved(cases, args.rounds)
        size = subprocess.run(["du", "-sh", str(co / ".git")], capture_output=True, text=True)
        base = median_ms(samples["plain"])
        rows = [
            [name, f"{median_ms(s):.0f}", f"{median_ms(s) / base:.2f}x"]
            for name, s in samples.items()
        ]
        print(f"checkout: {args.files} files x {args.kib} KiB; .git {size.stdout.split()[0]}")
        print(table(rows, ["variant", "median ms", "vs plain"]))
        print(machine_note())
        shutil.rmtree(copy, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
