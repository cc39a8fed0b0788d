"""`drift --inspect` of a moved tag: pull-and-probe (before) vs stream-and-index (now); and
with `--baseline REV`, `inspect` of a normal ~600 MB image by REV vs the working tree.

    .venv/bin/python benchmarks/bench_inspect.py [--shared-mb 400] [--own-mb 150]
    .venv/bin/python benchmarks/bench_inspect.py --baseline main [--real-mb 1750] [--rounds 3]

`--baseline REV` (issue 22: "inspect of a normal 600 MB image is no slower than before"): one
image of the demo image's layers plus a gzip'd layer of --real-mb MB of real files from this
machine (shared libraries, Python packages: `benchmarks/_layers.py`; 1750 MB pack to
~505 MB, so the image is ~620 MB), pushed to the local registry. REV's `rocmenv` is exported with `git archive` and run
from `PYTHONPATH`; the two run `inspect --json` alternately, --rounds times (after a warm-up
each): cold (an empty layer index: every layer streamed and indexed) and then warm (the index
just made). Both must report the same distributions. Medians, the ratio and the load average
are printed. Afterwards the image's blobs are removed from the registry's storage.

Setup: two sibling images pushed to the local registry, each the demo image (~117 MB) plus a
shared layer of --shared-mb and a layer of its own of --own-mb (random bytes: incompressible,
so the sizes are what crosses the wire), so each is >= 500 MB. A lockfile pins the first
under a tag, then the tag is moved to the second. Everything (the engine's pulls and
rocmenv's reads) goes through a proxy in front of the registry that counts the bytes of the
blobs served.

Cases (one run each, the engine's copies of both images removed before each):
- before: `drift --inspect --inspect-from engine` (pull both by digest, probe in containers)
- now, cold index: `drift --inspect` with an empty layer index
- now, warm index: yesterday's image already indexed (`inspect` of the pinned image first,
  not timed), then `drift --inspect`: only the moved image's new layer is read
Measured: wall time, bytes served by the registry, growth of the engine's image store
(images added, and free-space change of its data root). Targets (issue 11): store growth 0,
warm bytes = the new layers only, wall time <= 0.5x the pull-and-probe way.
Afterwards the big images are removed from the engine, and their blobs and repository from
the registry's storage.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine_note, rocmenv_cmd, table
from benchmarks._layers import export_revision, real_layer
from tests.support import testenv
from tests.support.faultproxy import FaultProxy

TAG = "v0.5.8-rocm700-mi30x-20260215"
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(files: dict[str, bytes]) -> tuple[bytes, str]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tar_bytes = raw.getvalue()
    return gzip.compress(tar_bytes, compresslevel=1, mtime=0), _sha(tar_bytes)


def push_sibling(
    client: testenv.RegistryClient,
    repo: str,
    tag: str,
    shared: tuple[bytes, str],
    own: tuple[bytes, str],
) -> str:
    demo = testenv.load_family()["demo"]
    manifest = client.get_manifest(demo.repository, demo.tag).json()
    config = json.loads(client.get_blob(demo.repository, manifest["config"]["digest"]))
    layers = list(manifest["layers"])
    for entry in layers:
        client.mount_blob(repo, entry["digest"], demo.repository)
    for blob, diff_id in (shared, own):
        client.upload_blob(repo, blob)
        layers.append(
            {
                "mediaType": manifest["layers"][0]["mediaType"],
                "size": len(blob),
                "digest": _sha(blob),
            }
        )
        config["rootfs"]["diff_ids"].append(diff_id)
    config_blob = json.dumps(config).encode()
    client.upload_blob(repo, config_blob)
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {**manifest["config"], "size": len(config_blob), "digest": _sha(config_blob)},
            "layers": layers,
        }
    ).encode()
    return client.put_manifest(repo, tag, body, MANIFEST)


def remove_from_registry(repo: str, digests: list[str]) -> None:
    """The big blobs are this benchmark's alone: delete their files and the repository from
    the registry's storage (scripts/setup.sh keeps it under the test state directory)."""
    import shutil

    storage = testenv.state_dir() / "registry-open" / "storage" / "docker" / "registry" / "v2"
    for digest in digests:
        hexpart = digest.split(":", 1)[1]
        shutil.rmtree(storage / "blobs" / "sha256" / hexpart[:2] / hexpart, ignore_errors=True)
    shutil.rmtree(storage / "repositories" / repo, ignore_errors=True)


def store_free() -> int:
    root = subprocess.run(
        ["docker", "info", "--format", "{{.DockerRootDir}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    stat = os.statvfs(root)
    return stat.f_bavail * stat.f_frsize


def images(repo: str) -> dict[str, int]:
    """The engine's images of the benchmark's repository: id -> size."""
    out = subprocess.run(
        ["docker", "images", "--all", "--no-trunc", "--format", "{{.Repository}} {{.ID}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    ids = {line.split()[1] for line in out.splitlines() if line.split()[0].endswith(repo)}
    sizes = {}
    for image_id in ids:
        size = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Size}}", image_id],
            capture_output=True,
            text=True,
        ).stdout.strip()
        sizes[image_id] = int(size or 0)
    return sizes


def served(proxy: FaultProxy, sizes: dict[str, int]) -> int:
    total = 0
    for entry in proxy.log:
        digest = entry.path.rsplit("/", 1)[-1]
        if entry.method == "GET" and "/blobs/" in entry.path and entry.status in (200, 206):
            total += sizes.get(digest, 0)
    return total


def push_real_image(client: testenv.RegistryClient, repo: str, real_mb: int) -> tuple[str, str]:
    """The demo image plus one gzip'd layer of real files; its tag and the layer's digest."""
    layer = real_layer(real_mb)
    blob = layer.gzip.read_bytes()
    diff_id = hashlib.sha256()
    with layer.tar.open("rb") as tar:
        while data := tar.read(1 << 20):
            diff_id.update(data)
    marker = _layer(
        {
            "usr/local/lib/python3.11/dist-packages/bench_pkg-1.0.dist-info/METADATA": b"Name: bench-pkg\nVersion: 1.0\n",
        }
    )
    push_sibling(client, repo, "real", (blob, f"sha256:{diff_id.hexdigest()}"), marker)
    return "real", _sha(blob)


def compare_baseline(args: argparse.Namespace) -> int:
    repo = testenv.unique_repo("bench-inspect-base")
    print(f"pushing the demo image + {args.real_mb} MB of real files to {repo} …", flush=True)
    with testenv.RegistryClient(host="127.0.0.1:5000") as client:
        tag, big = push_real_image(client, repo, args.real_mb)
        size = sum(e["size"] for e in client.get_manifest(repo, tag).json()["layers"])
    print(f"image: {size / 1e6:.0f} MB compressed; {machine_note()}", flush=True)
    ref = f"127.0.0.1:5000/{repo}:{tag}"
    times: dict[str, list[float]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = export_revision(args.baseline, Path(tmp) / "base")
        work = Path(tmp) / "work"
        work.mkdir()

        def inspect(who: str, cache: Path) -> tuple[float, dict[str, str]]:
            env = {**os.environ, "HOME": str(work), "XDG_CACHE_HOME": str(cache)}
            env.pop("GITHUB_ACTIONS", None)
            if who == "baseline":
                env["PYTHONPATH"] = str(base)
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "rocmenv", "inspect", ref, "--json"],
                cwd=work, env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            return time.perf_counter() - start, json.loads(done.stdout)["distributions"]

        def round_(n: int) -> None:
            for who in ("baseline", "now"):
                cache = Path(tmp) / f"cache-{who}-{n}"
                cold, dists = inspect(who, cache)
                warm, again = inspect(who, cache)
                assert dists == again and dists.get("bench-pkg") == "1.0", dists
                times.setdefault(f"{who} cold", []).append(cold)
                times.setdefault(f"{who} warm", []).append(warm)
                print(f"  {who}: cold {cold:.2f} s, warm {warm:.2f} s", flush=True)
            loads.append(os.getloadavg()[0])

        try:
            round_(0)  # warm-up: the registry's page cache, imports
            times.clear()
            for n in range(1, args.rounds + 1):
                round_(n)
        finally:
            remove_from_registry(repo, [big])
    rows = []
    for name, samples in times.items():
        median = sorted(samples)[len(samples) // 2]
        before = sorted(times[name.replace("now", "baseline")])[len(samples) // 2]
        ratio = "" if name.startswith("baseline") else f"{median / before:.2f}x"
        rows.append([name, f"{median:.2f} s", ratio, " ".join(f"{s:.2f}" for s in samples)])
    print()
    print(table(rows, ["case", "median", f"vs {args.baseline}", "samples"]))
    print(f"load average during the rounds: {min(loads):.1f}–{max(loads):.1f}")
    print(machine_note())
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared-mb", type=int, default=400)
    parser.add_argument("--own-mb", type=int, default=150)
    parser.add_argument("--baseline", metavar="REV", help="inspect by REV vs the working tree")
    parser.add_argument("--real-mb", type=int, default=1750, help="with --baseline")
    parser.add_argument("--rounds", type=int, default=3, help="with --baseline")
    args = parser.parse_args()
    if args.baseline:
        return compare_baseline(args)
    repo = testenv.unique_repo("bench-inspect")
    print(f"building two siblings in 127.0.0.1:5000/{repo} …", flush=True)
    shared = _layer({"opt/big/shared.bin": os.urandom(args.shared_mb << 20)})
    own_a = _layer(
        {
            "opt/big/a.bin": os.urandom(args.own_mb << 20),
            "usr/local/lib/python3.11/dist-packages/bench_pkg-1.0.dist-info/METADATA": b"Name: bench-pkg\nVersion: 1.0\n",
        }
    )
    own_b = _layer(
        {
            "opt/big/b.bin": os.urandom(args.own_mb << 20),
            "usr/local/lib/python3.11/dist-packages/bench_pkg-1.1.dist-info/METADATA": b"Name: bench-pkg\nVersion: 1.1\n",
        }
    )
    with testenv.RegistryClient(host="127.0.0.1:5000") as client:
        digest_a = push_sibling(client, repo, "a", shared, own_a)
        digest_b = push_sibling(client, repo, "b", shared, own_b)
        sizes = {}
        for ref in ("a", "b"):
            for entry in client.get_manifest(repo, ref).json()["layers"]:
                sizes[entry["digest"]] = entry["size"]
        image_mb = {
            ref: sum(e["size"] for e in client.get_manifest(repo, ref).json()["layers"]) / 1e6
            for ref in ("a", "b")
        }
        big = [_sha(shared[0]), _sha(own_a[0]), _sha(own_b[0])]
        del shared, own_a, own_b
        client.put_manifest(repo, TAG, client.get_manifest(repo, "a").body, MANIFEST)
    print(f"image sizes (compressed): a {image_mb['a']:.0f} MB, b {image_mb['b']:.0f} MB")
    rocmenv = rocmenv_cmd()
    rows = []
    with FaultProxy(upstream="127.0.0.1:5000") as proxy, tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / ".git").mkdir()
        ref = f"{proxy.host}/{repo}:{TAG}"
        env = {**os.environ, "HOME": str(project), "XDG_CACHE_HOME": str(project / "cache")}
        env.pop("GITHUB_ACTIONS", None)
        subprocess.run(
            [*rocmenv, "pin", ref], cwd=project, env=env, check=True, capture_output=True
        )
        with testenv.RegistryClient(host="127.0.0.1:5000") as client:  # the tag moves to b
            client.put_manifest(repo, TAG, client.get_manifest(repo, "b").body, MANIFEST)

        def forget_pulls() -> None:
            for digest in (digest_a, digest_b):
                subprocess.run(
                    ["docker", "image", "rm", "--force", f"{proxy.host}/{repo}@{digest}"],
                    capture_output=True,
                )

        def case(
            name: str, *extra: str, prepare: list[str] | None = None, fresh: bool = True
        ) -> None:
            forget_pulls()
            if fresh:
                subprocess.run(["rm", "-rf", str(project / "cache")], check=True)
            if prepare:
                subprocess.run(
                    [*rocmenv, *prepare], cwd=project, env=env, check=True, capture_output=True
                )
            proxy.reset_log()
            before_images, before_free = images(repo), store_free()
            start = time.perf_counter()
            done = subprocess.run(
                [*rocmenv, "drift", "--inspect", "--format", "json", *extra],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
            )
            wall = time.perf_counter() - start
            report = json.loads(done.stdout)
            inspect = report["images"][0]["inspect"]
            assert done.returncode == 1 and inspect and inspect["error"] is None, done.stderr
            changes = {p["name"]: (p["pinned"], p["new"]) for p in inspect["packages"]}
            assert changes == {"bench-pkg": ("1.0", "1.1")}, changes
            after_images = images(repo)
            added = {k: v for k, v in after_images.items() if k not in before_images}
            growth = before_free - store_free()
            rows.append(
                [
                    name,
                    f"{wall:.1f} s",
                    f"{served(proxy, sizes) / 1e6:.0f} MB",
                    f"{len(added)} images, {sum(added.values()) / 1e6:.0f} MB",
                    f"{growth / 1e6:+.0f} MB",
                ]
            )
            print(rows[-1], flush=True)

        try:
            case("before: pull + probe (--inspect-from engine)", "--inspect-from", "engine")
            case("now: stream + index, cold index")
            case(
                "now: stream + index, warm index (pinned image indexed)",
                prepare=["inspect", f"{proxy.host}/{repo}@{digest_a}", "--json"],
            )
            case("now: index fully warm (second run)", fresh=False)
        finally:
            forget_pulls()
            remove_from_registry(repo, big)
    print()
    print(
        table(
            rows,
            [
                "case",
                "wall time",
                "bytes from registry",
                "images added to the engine",
                "free-space change of its disk (all users)",
            ],
        )
    )
    print()
    before = float(rows[0][1].split()[0])
    for row in rows[1:]:
        print(f"ratio {row[0]!r} / before = {float(row[1].split()[0]) / before:.2f}")
    print(machine_note())
    return 0


if __name__ == "__main__":
    sys.exit(main())
