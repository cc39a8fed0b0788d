"""The runner image cache (issue 32) against (A) a plain ``docker pull`` per job and (B) the
tarball cache (``docker save | zstd`` seeded by the first job, ``zstd -dc | docker load``
after), side by side in one run, each job on a Docker engine started fresh for it as a DinD
pod has it (``_link.FreshEngine``).

The stand-ins (sizes scaled down, proportions real):

- "upstream": a Distribution registry behind a link of ``--link-mbps`` MB/s shared by every
  connection, 5 ms each way (``_link.LinkProxy``; every byte it carries is counted);
- a LAN mirror of the same registry that serves the first ``--stall-after`` of the image and
  then stalls every connection (``_link.StallingMirror``);
- two consecutive "nightlies": ``--base-share`` of each image's bytes are base layers both
  share (the ``rocm/pytorch`` base, about 17 of the ~23 GB a ``rocm/sgl-dev`` nightly
  pulls), the rest are layers of their own (sglang, aiter and its prebuilt kernels). Layers
  are tars of real files from this machine (libraries, Python packages, data), gzip'd at
  level 6 as ``docker push`` does; ``--image-mb`` MB uncompressed per image.

Every timed job starts after ``sync`` and with the kernel's caches dropped (:func:`settle`:
the previous job's writes on disk, its source read cold), on a byte-compiled rocmenv
(``compileall``, as an installed one runs). With ``--rounds N`` the paired jobs —
the first job against (A), the later job against (B)'s load — run side by side N times,
which of a pair goes first alternating (an even N balances it), and the figures are the
medians.

Usage: ``sudo .venv/bin/python benchmarks/bench_image_cache.py [--image-mb 400]
[--link-mbps 20] [--rounds 3] [--engine docker-api|docker-cli] [--clean]``. Root: it starts Docker engines. Prints every figure of the
issue with its target, and exits 1 when one misses.
"""

from __future__ import annotations

import argparse
import compileall
import functools
import gzip
import hashlib
import http.client
import io
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, rocmenv_cmd
from _link import FreshEngine, LinkProxy, Registry, StallingMirror

WORK = Path(tempfile.gettempdir()) / "rocmenv-bench" / "image-cache"
REPO = "h32bench/sgl-dev"
SOURCES = ("/usr/lib", "/usr/local")  # libraries, Python packages, CUDA: what ML layers hold


# -- the two nightlies -----------------------------------------------------------------------


def _files() -> list[str]:
    out = []
    for source in SOURCES:
        for directory, dirs, files in os.walk(source):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(directory, name)
                if os.path.islink(full) or not os.path.isfile(full):
                    continue
                # files of up to 4 MB: many per layer, so each layer compresses like the whole
                if os.path.getsize(full) <= 4 << 20 and not _packed(full):
                    out.append(full)
    # shuffled (with a fixed seed): every layer gets a like mix of libraries, text and data,
    # so each compresses like the whole and the shares hold for compressed bytes too
    import random

    random.Random(32).shuffle(out)
    return out


_PACKED = (b"\x1f\x8b", b"PK", b"\xfd7zX", b"\x28\xb5\x2f\xfd", b"BZh", b"\x89PNG", b"\xff\xd8",
           b"\xca\xfe\xda\xda")  # fmt: skip


def _packed(path: str) -> bool:
    """Already compressed (gzip, zip/jar/wheel, xz, zstd, bzip2, PNG, JPEG, a JDK's jimage):
    an image's layers hold libraries, Python packages and kernels, which compress about 2:1
    as real ML images do; archives of archives would not."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
    except OSError:
        return True
    return head.startswith(_PACKED)


def _layer(files: list[str], start: int, target: int, salt: str) -> tuple[bytes, int]:
    """A gzip'd tar of real files from ``files[start:]`` (about ``target`` bytes), and where
    it stopped."""
    raw = io.BytesIO()
    total, i = 0, start
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"etc/nightly-{salt}")
        data = salt.encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        while total < target and i < len(files):
            try:
                tar.add(files[i], arcname=files[i].lstrip("/"), recursive=False)
                total += os.path.getsize(files[i]) + 512
            except OSError:
                pass
            i += 1
    return gzip.compress(raw.getvalue(), compresslevel=6, mtime=0), i


def build_images(image_mb: int, base_share: float) -> dict[str, list[bytes]]:
    """The layers of the two nightlies (cached under WORK)."""
    key = f"{image_mb}mb-{base_share:.2f}-v5"
    store = WORK / "layers" / key
    index = store / "index.json"
    if index.exists():
        doc = json.loads(index.read_text())
        return {n: [(store / d).read_bytes() for d in ds] for n, ds in doc.items()}
    print(f"making the two nightlies' layers ({image_mb} MB each, once) …", file=sys.stderr)
    files = _files()
    total = image_mb * 1_000_000
    base_sizes = [int(total * base_share * f) for f in (0.05, 0.30, 0.25, 0.25, 0.15)]
    top_sizes = [int(total * (1 - base_share) * f) for f in (0.6, 0.3, 0.1)]
    at = 0
    base = []
    for n, size in enumerate(base_sizes):
        layer, at = _layer(files, at, size, f"base-{n}")
        base.append(layer)
    images: dict[str, list[bytes]] = {}
    for night in ("20260823", "20260824"):
        tops = []
        for n, size in enumerate(top_sizes):
            layer, at = _layer(files, at, size, f"{night}-{n}")
            tops.append(layer)
        images[night] = base + tops
    store.mkdir(parents=True, exist_ok=True)
    doc = {}
    for night, layers in images.items():
        doc[night] = []
        for layer in layers:
            digest = hashlib.sha256(layer).hexdigest()
            (store / digest).write_bytes(layer)
            doc[night].append(digest)
    index.write_text(json.dumps(doc))
    return images


def _http(
    port: int, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def push(port: int, layers: list[bytes], tag: str) -> tuple[str, str, int]:
    """Push an image; → (manifest digest, config digest, compressed size of its layers)."""
    diff_ids = ["sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest() for layer in layers]
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }, sort_keys=True).encode()  # fmt: skip
    descriptors = []
    for blob in [config, *layers]:
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        status, _, _ = _http(port, "HEAD", f"/v2/{REPO}/blobs/{digest}")
        if status != 200:
            status, headers, _ = _http(port, "POST", f"/v2/{REPO}/blobs/uploads/")
            location = headers["location"].split(f"127.0.0.1:{port}", 1)[-1]
            sep = "&" if "?" in location else "?"
            status, _, text = _http(port, "PUT", f"{location}{sep}digest={digest}", blob,
                                    {"Content-Type": "application/octet-stream"})  # fmt: skip
            assert status == 201, text
        descriptors.append({"digest": digest, "size": len(blob)})
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   **descriptors[0]},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", **d}
                   for d in descriptors[1:]],
    }).encode()  # fmt: skip
    status, _, text = _http(port, "PUT", f"/v2/{REPO}/manifests/{tag}", manifest,
                            {"Content-Type": "application/vnd.docker.distribution.manifest.v2+json"})  # fmt: skip
    assert status == 201, text
    return (
        "sha256:" + hashlib.sha256(manifest).hexdigest(),
        descriptors[0]["digest"],
        sum(len(layer) for layer in layers),
    )


# -- jobs --------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.n = 0
        self.engines = WORK / "engines"

    def engine(self) -> FreshEngine:
        self.n += 1
        return FreshEngine(self.engines, f"h32e{os.getpid() % 10000}-{self.n}")

    def rocmenv_env(
        self, engine: FreshEngine, cache: Path, mirror: int | None = None
    ) -> dict[str, str]:
        env = {**engine.env(), "ROCMENV_IMAGE_CACHE": str(cache), "ROCMENV_SITE_CONFIG": "",
               "XDG_DATA_HOME": str(WORK / "xdg"), "XDG_CACHE_HOME": str(WORK / "xdg-cache"),
               "ROCMENV_DISK_RESERVE": "1g"}  # fmt: skip
        env.pop("ROCMENV_MIRRORS", None)
        if mirror is not None:
            env["ROCMENV_MIRRORS"] = f"127.0.0.1:{self.link.port}=127.0.0.1:{mirror}"
        return env

    def timed(self, argv: list[str], env: dict[str, str], **kw: object) -> tuple[float, bytes]:
        settle()
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, **kw)  # type: ignore[call-overload]
        took = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(
                f"failed ({done.returncode}): {' '.join(argv)}\n{done.stderr.decode()[-3000:]}"
            )
        return took, done.stdout + done.stderr

    def link_bytes(self, fn: object) -> tuple[float, int, bytes]:
        before = self.link.down
        took, out = fn()  # type: ignore[operator]
        return took, self.link.down - before, out

    def ref(self, manifest: str) -> str:
        return f"127.0.0.1:{self.link.port}/{REPO}@{manifest}"

    def plain_pull(self, manifest: str) -> tuple[float, int]:
        with self.engine() as e:
            took, moved, _ = self.link_bytes(
                lambda: self.timed(
                    ["docker", "-H", e.host, "pull", "-q", self.ref(manifest)], e.env()
                )
            )
        return took, moved

    def tarball_seed(self, manifest: str, tarball: Path) -> tuple[float, int]:
        with self.engine() as e:

            def job() -> tuple[float, bytes]:
                t1, _ = self.timed(
                    ["docker", "-H", e.host, "pull", "-q", self.ref(manifest)], e.env()
                )
                t2, _ = self.timed(
                    [
                        "sh",
                        "-c",
                        f"docker -H {e.host} save {self.ref(manifest)} | zstd -q -T0 -3 -o {tarball}.part && mv {tarball}.part {tarball}",
                    ],
                    e.env(),
                )
                return t1 + t2, b""

            took, moved, _ = self.link_bytes(job)
        return took, moved

    def tarball_load(self, tarball: Path) -> float:
        with self.engine() as e:
            took, _ = self.timed(
                ["sh", "-c", f"zstd -q -dc {tarball} | docker -H {e.host} load -q"], e.env()
            )
        return took

    def cache_job(
        self, manifest: str, cache: Path, mirror: int | None = None, engine_kind: str = ""
    ) -> tuple[float, int, dict[str, object]]:
        engine_kind = engine_kind or self.args.engine
        with self.engine() as e:
            argv = [*rocmenv_cmd(), "pull", "--engine", engine_kind, "--json", self.ref(manifest)]
            took, moved, out = self.link_bytes(
                lambda: self.timed(argv, self.rocmenv_env(e, cache, mirror))
            )
            doc = json.loads(out.decode().splitlines()[0])["pulled"][0]
            check = e.docker(
                "image", "inspect", "--format", "{{.Id}}", doc["present_as"], capture_output=True
            )
            doc["engine_id"] = check.stdout.decode().strip()
            doc["log"] = out.decode()
        return took, moved, doc


def settle() -> None:
    """Before a timed job: what the previous job wrote on disk (the kernel's writeback of its
    400 MB would be charged to whichever job comes next) and the page, dentry and inode
    caches dropped, so every job reads its source cold, as a job on a fresh runner pod reads
    the node's persistent volume. Measured without this, the second job of a pair was slower
    by 1-11 s whichever method it was (five rounds, alternating order)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def blob_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in (cache / "blobs" / "sha256").iterdir())


def verify_cache(cache: Path) -> bool:
    for path in (cache / "blobs" / "sha256").iterdir():
        h = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        if h.hexdigest() != path.name:
            return False
    return True


def more_rounds(
    bench: Bench,
    pairs: dict[str, list[float]],
    rounds: int,
    manifest: str,
    tarball: Path,
    cache: Path,
    work: Path,
) -> None:
    """Rounds 2…N of the two timed pairs, interleaved (each pair side by side, load alike),
    which of a pair goes first alternating from round to round."""
    for r in range(1, rounds):
        cold = work / f"cache-round-{r}"
        jobs: list[dict[str, Callable[[], float]]] = [
            {"a": lambda: bench.plain_pull(manifest)[0],
             "c": functools.partial(lambda at: bench.cache_job(manifest, at)[0], cold)},
            {"b": lambda: bench.tarball_load(tarball),
             "l": lambda: bench.cache_job(manifest, cache)[0]},
        ]  # fmt: skip
        for pair in jobs:
            for key in sorted(pair, reverse=r % 2 == 1):
                pairs[key].append(pair[key]())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image-mb", type=int, default=400, help="uncompressed MB per image")
    parser.add_argument("--base-share", type=float, default=0.75)
    parser.add_argument("--link-mbps", type=float, default=20.0, help="upstream link, MB/s")
    parser.add_argument(
        "--stall-after", type=float, default=0.3, help="share served by the mirror before it stalls"
    )
    parser.add_argument("--clean", action="store_true", help="make the layers again")
    parser.add_argument(
        "--engine", default="docker-api", choices=("docker-api", "docker-cli"),
        help="rocmenv's engine adapter (docker-api: what it picks for a socket that answers)",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="rounds of the two timed pairs (first job vs A, later job vs B's load), "
        "interleaved; their medians are the figures",
    )  # fmt: skip
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark starts Docker engines")
    if args.clean:
        shutil.rmtree(WORK, ignore_errors=True)
    images = build_images(args.image_mb, args.base_share)
    compileall.compile_dir(str(ROOT / "rocmenv"), quiet=1)  # an installed rocmenv: bytecode
    work = WORK / f"run-{os.getpid()}"
    work.mkdir(parents=True)
    load = os.getloadavg()
    rows: list[tuple[str, str, str, str, bool]] = []

    def row(name: str, value: float, target: float, detail: str, lower_ok: bool = True) -> None:
        ok = value <= target if lower_ok else value >= target
        rows.append((name, f"{value:.2f}", f"≤ {target:.2f}", detail, ok))

    with (
        Registry(work / "registry") as reg,
        LinkProxy(("127.0.0.1", reg.port), args.link_mbps * 1e6) as link,
    ):
        bench = Bench(args)
        bench.link = link  # type: ignore[attr-defined]
        n1, n2 = sorted(images)
        m1, c1, size1 = push(reg.port, images[n1], f"v0.5.18-rocm724-mi30x-{n1}")
        m2, _c2, _size2 = push(reg.port, images[n2], f"v0.5.18-rocm724-mi30x-{n2}")
        lacks = sum(len(x) for x in images[n2] if x not in images[n1])
        print(
            f"images: {size1 / 1e6:.0f} MB compressed each, nightly 2 lacks {lacks / 1e6:.0f} MB; "
            f"link {args.link_mbps:g} MB/s; load average before {load[0]:.2f}",
            file=sys.stderr,
        )
        # (A) plain docker pull per job
        a_first, a_bytes = bench.plain_pull(m1)
        a_next, a_next_bytes = bench.plain_pull(m2)
        # (B) the tarball cache
        t1, t2 = work / "n1.tar.zst", work / "n2.tar.zst"
        b_first, _ = bench.tarball_seed(m1, t1)
        b_load = bench.tarball_load(t1)
        b_next, b_next_bytes = bench.tarball_seed(m2, t2)
        b_two = t1.stat().st_size + t2.stat().st_size
        # (C) the image cache
        cache = work / "cache"
        c_first, _, _ = bench.cache_job(m1, cache)
        c_later, c_later_bytes, _ = bench.cache_job(m1, cache)
        pairs = {"a": [a_first], "c": [c_first], "b": [b_load], "l": [c_later]}
        more_rounds(bench, pairs, args.rounds, m1, t1, cache, work)
        a_first, c_first, b_load, c_later = (statistics.median(pairs[k]) for k in "acbl")
        c_next, c_next_bytes, _ = bench.cache_job(m2, cache)
        c_two = blob_bytes(cache)
        # stalled mirror: cold cache, mirror then upstream, against upstream alone (c_first)
        with StallingMirror(("127.0.0.1", reg.port), int(size1 * args.stall_after)) as mirror:
            c_mirror, _, d4 = bench.cache_job(m1, work / "cache-mirror", mirror.port)
        # three cold jobs at once, one cache
        cache3 = work / "cache-3"
        engines = [bench.engine() for _ in range(3)]
        for e in engines:
            e.__enter__()
        try:
            before = link.down
            procs = [subprocess.Popen([*rocmenv_cmd(), "pull", "--engine", args.engine, "--json", bench.ref(m1)],
                                      env=bench.rocmenv_env(e, cache3), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for e in engines]  # fmt: skip
            start = time.perf_counter()
            outs = [p.communicate() for p in procs]
            three = time.perf_counter() - start
            three_bytes = link.down - before
            if any(p.returncode for p in procs):
                raise SystemExit(
                    "a concurrent job failed:\n" + "\n".join(o[1].decode()[-1500:] for o in outs)
                )
            three_ids = {
                e.docker("image", "inspect", "--format", "{{.Id}}", c1, capture_output=True)
                .stdout.decode()
                .strip()
                for e in engines
            }
        finally:
            for e in engines:
                e.__exit__(None, None, None)
        # kill -9 mid-pull, then the next job
        cache_k = work / "cache-kill"
        with bench.engine() as e:
            p = subprocess.Popen([*rocmenv_cmd(), "pull", "--engine", args.engine, bench.ref(m1)],
                                 env=bench.rocmenv_env(e, cache_k), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            partial = cache_k / "partial" / "sha256"
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                got = sum(f.stat().st_size for f in partial.glob("*")) if partial.exists() else 0
                got += blob_bytes(cache_k) if (cache_k / "blobs" / "sha256").exists() else 0
                if got > 0.4 * size1:
                    break
                time.sleep(0.1)
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
            killed_at = got
            loaded = e.docker("images", "-q", capture_output=True).stdout.decode().split()
        unverified = not verify_cache(cache_k)
        k_time, k_bytes, dk = bench.cache_job(m1, cache_k)
        k_ok = dk["engine_id"] == c1 and verify_cache(cache_k)

    row(
        "first job, empty cache / (A) docker pull",
        c_first / a_first,
        1.10,
        f"{c_first:.1f} s vs {a_first:.1f} s",
    )
    row(
        "later job, fresh engine / (B) zstd|docker load",
        c_later / b_load,
        1.10,
        f"{c_later:.1f} s vs {b_load:.1f} s; {c_later_bytes} B over the link",
    )
    rows.append(
        ("later job: bytes over the link", str(c_later_bytes), "= 0", "", c_later_bytes == 0)
    )
    row(
        "next nightly: link bytes / layers it lacks",
        c_next_bytes / lacks,
        1.05,
        f"{c_next_bytes / 1e6:.1f} MB vs {lacks / 1e6:.1f} MB; (A) {a_next_bytes / 1e6:.1f} MB, (B) {b_next_bytes / 1e6:.1f} MB",
    )
    row(
        "cache with both nightlies / (B) two tarballs",
        c_two / b_two,
        0.65,
        f"{c_two / 1e6:.1f} MB vs {b_two / 1e6:.1f} MB",
    )
    rows.append(
        (
            "stalled mirror: seconds over upstream alone",
            f"{c_mirror - c_first:.1f}",
            "≤ 30",
            f"{c_mirror:.1f} s vs {c_first:.1f} s; {'; '.join(d4.get('log', '').split(chr(10))[:0])}",
            c_mirror - c_first <= 30 and d4["engine_id"] == c1,
        )
    )
    row(
        "three cold jobs at once: link bytes / one image",
        three_bytes / size1,
        1.15,
        f"{three_bytes / 1e6:.1f} MB vs {size1 / 1e6:.1f} MB in {three:.1f} s; same id: {three_ids == {c1}}",
    )
    rows.append(
        (
            "kill -9 mid-pull, next job completes verified",
            "yes" if k_ok and not unverified and not loaded else "no",
            "yes",
            f"killed at {killed_at / 1e6:.0f} MB; nothing loaded: {not loaded}; next job {k_time:.1f} s, "
            f"{k_bytes / 1e6:.1f} MB over the link; id = config digest: {dk['engine_id'] == c1}",
            k_ok and not unverified and not loaded,
        )
    )
    load_after = os.getloadavg()
    width = max(len(r[0]) for r in rows)
    print(
        f"\nimage cache (issue 32): {args.image_mb} MB/image uncompressed, {size1 / 1e6:.0f} MB "
        f"compressed, base share {args.base_share:.2f}, link {args.link_mbps:g} MB/s; "
        f"load average {load[0]:.2f} before, {load_after[0]:.2f} after, {os.cpu_count()} cores"
    )
    print(f"{'figure'.ljust(width)}  {'value':>8}  {'target':>7}  ok   detail")
    for name, value, target, detail, ok in rows:
        print(f"{name.ljust(width)}  {value:>8}  {target:>7}  {'yes' if ok else 'NO ':<4} {detail}")
    if args.rounds > 1:
        print(f"rounds ({args.rounds}): (A) first {pairs['a']}, (C) first {pairs['c']}, "
              f"(B) load {pairs['b']}, (C) later {pairs['l']}")  # fmt: skip
    print(
        f"\n(A) docker pull: first {a_first:.1f} s ({a_bytes / 1e6:.1f} MB), next nightly {a_next:.1f} s; "
        f"(B) seed {b_first:.1f} s, load {b_load:.1f} s, next nightly {b_next:.1f} s; "
        f"(C) first {c_first:.1f} s, later {c_later:.1f} s, next nightly {c_next:.1f} s, with the stalled mirror {c_mirror:.1f} s"
    )
    for line in d4["log"].splitlines():
        if "leaving" in line:
            print(f"mirror switch: {line.strip()}")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(r[4] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
