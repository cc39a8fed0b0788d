"""``rocmenv inspect`` / ``diff``: images read from the registry agree with a probe run in a
container, diffs name exactly what changed, and a sibling costs only its new layers.

The family under test: every image of ``images/family.toml`` (built by scripts/setup.sh),
plus members made here on top of the demo image by pushing hand-made layers through the
registry API (they share the demo's base and stand-in layers):

- ``whiteout``: a layer whiting out the ``amd-aiter`` dist-info (deleting the distribution),
  then a layer re-adding it at another version, and in that same layer an opaque
  ``sglang`` dist-info directory holding a new version;
- ``twosite``: ``torch`` also in ``/usr/lib/python3/dist-packages`` (the copy in
  ``/usr/local/lib/python3.11/dist-packages`` comes first on ``sys.path`` and wins) and a new
  ``numpy`` there;
- ``develop``: aiter installed the ``setup.py develop`` way (egg-info and package in
  ``/sgl-workspace/aiter``, on ``sys.path`` through ``easy-install.pth``), the site-packages
  copy whited out;
- ``rocmlink``: ``/opt/rocm`` replaced by a symlink to ``/opt/rocm-7.2.1``;
- ``zstd``: the very same layer as ``twosite``, zstd-compressed in an OCI manifest. The
  engine here (Docker 20.10) cannot unpack zstd layers, so its container probe is that of its
  gzip twin, ``twosite``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from rocmenv.registry.manifest import sha256_digest
from tests.support import testenv
from tests.support.faultproxy import FaultProxy

SITE = "usr/local/lib/python3.11/dist-packages"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
DOCKER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def _tar(entries: Mapping[str, bytes | str | None]) -> bytes:
    """A layer tar: ``path -> content`` (``None``: a directory, a ``str``: a symlink to it);
    parents are added."""
    raw = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, content in entries.items():
            parts = path.split("/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in seen:
                    seen.add(parent)
                    info = tarfile.TarInfo(parent)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            info = tarfile.TarInfo(path)
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    return raw.getvalue()


def _metadata(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()


def push_member(
    client: testenv.RegistryClient,
    base_ref: str,
    repo: str,
    tag: str,
    layers: list[tuple[bytes, str]],  # (uncompressed tar, "gzip" | "zstd")
) -> str:
    """The base image plus ``layers``, pushed as an OCI image; returns its reference."""
    _, base_repo, reference = testenv.split_ref(base_ref)
    manifest = client.get_manifest(base_repo, reference).json()
    config = json.loads(client.get_blob(base_repo, manifest["config"]["digest"]))
    descriptors = []
    for entry in manifest["layers"]:
        client.mount_blob(repo, entry["digest"], base_repo)
        descriptors.append({**entry, "mediaType": OCI_GZIP})
    for tar, compression in layers:
        if compression == "zstd":
            import zstandard

            blob, media_type = zstandard.ZstdCompressor().compress(tar), OCI_ZSTD
        else:
            blob, media_type = gzip.compress(tar, mtime=0), OCI_GZIP
        client.upload_blob(repo, blob)
        descriptors.append(
            {"mediaType": media_type, "size": len(blob), "digest": sha256_digest(blob)}
        )
        config["rootfs"]["diff_ids"].append(sha256_digest(tar))
    config_blob = json.dumps(config).encode()
    client.upload_blob(repo, config_blob)
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": OCI_CONFIG,
                "size": len(config_blob),
                "digest": sha256_digest(config_blob),
            },
            "layers": descriptors,
        }
    ).encode()
    client.put_manifest(repo, tag, body, OCI_MANIFEST)
    return f"127.0.0.1:5000/{repo}:{tag}"


@pytest.fixture(scope="module")
def members(family: testenv.Family) -> Iterator[dict[str, str]]:
    repo = testenv.unique_repo("inspect-family")
    demo = family["demo"].ref
    old_aiter = f"{SITE}/amd_aiter-0.1.9.post1.dist-info"
    deleted = _tar({f"{SITE}/.wh.amd_aiter-0.1.9.post1.dist-info": b""})
    readded = _tar(
        {
            f"{SITE}/amd_aiter-0.1.14.dist-info/METADATA": _metadata("amd-aiter", "0.1.14"),
            f"{SITE}/sglang-0.5.8.dist-info/.wh..wh..opq": b"",
            f"{SITE}/sglang-0.5.8.dist-info/METADATA": _metadata("sglang", "0.5.9"),
        }
    )
    second_site = _tar(
        {
            "usr/lib/python3/dist-packages/torch-1.13.0.dist-info/METADATA": _metadata(
                "torch", "1.13.0"
            ),
            "usr/lib/python3/dist-packages/numpy-1.24.2.dist-info/METADATA": _metadata(
                "numpy", "1.24.2"
            ),
        }
    )
    # aiter installed the `setup.py develop` way, as in the real images: the egg-info and
    # the package in /sgl-workspace/aiter, put on sys.path by easy-install.pth
    unhooked = _tar({f"{SITE}/.wh.amd_aiter-0.1.9.post1.dist-info": b"", f"{SITE}/.wh.aiter": b""})
    develop = _tar(
        {
            "sgl-workspace/aiter/amd_aiter.egg-info/PKG-INFO": _metadata(
                "amd-aiter", "0.1.12.dev5+gabc1234"
            ),
            "sgl-workspace/aiter/aiter/__init__.py": b"",
            "sgl-workspace/aiter/aiter/ops/__init__.py": b"",
            "sgl-workspace/aiter/aiter/ops/shuffle.py": b"def shuffle_scale_a16w4(src, n, g):\n    pass\n",
            f"{SITE}/easy-install.pth": b"/sgl-workspace/aiter\n",
        }
    )
    # /opt/rocm becomes a symlink to a versioned directory, as in the real ROCm images
    rocm_link = _tar({"opt/rocm": "rocm-7.2.1", "opt/rocm-7.2.1/.info/version": b"7.2.1-99\n"})
    with testenv.RegistryClient(host="127.0.0.1:5000") as client:
        assert old_aiter  # the stand-in's dist-info name (scripts/lib/testenv_setup.py)
        out = {
            "base": push_member(client, demo, repo, "base", []),
            "whiteout": push_member(
                client, demo, repo, "whiteout", [(deleted, "gzip"), (readded, "gzip")]
            ),
            "twosite": push_member(client, demo, repo, "twosite", [(second_site, "gzip")]),
            "zstd": push_member(client, demo, repo, "zstd", [(second_site, "zstd")]),
            "rocmlink": push_member(client, demo, repo, "rocmlink", [(rocm_link, "gzip")]),
            "develop": push_member(
                client, demo, repo, "develop", [(unhooked, "gzip"), (develop, "gzip")]
            ),
        }
    yield out
    for ref in out.values():
        subprocess.run(["docker", "image", "rm", ref], capture_output=True, check=False)


def rocmenv(
    home: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_DATA_HOME": str(home),
        **(env or {}),
    }
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def inspect_json(home: Path, ref: str) -> dict[str, Any]:
    done = rocmenv(home, "inspect", ref, "--json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def container_probe(home: Path, ref: str) -> dict[str, Any]:
    done = rocmenv(home, "shims", "check", "--image", ref, "--json")
    assert done.returncode == 0, done.stderr
    probe: dict[str, Any] = json.loads(done.stdout)["probe"]
    return probe


def _facts(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "python": doc["python"]["version"],
        "executable": doc["python"]["executable"],
        "rocm": doc["rocm"]["version"],
        "distributions": doc["distributions"],
        "shims": {
            s["name"]: (s["distribution"], s["version"], s["specifier_match"], s["would_apply"])
            for s in doc["shims"]
        },
    }


FAMILY = [image.name for image in testenv.load_family()]
MEMBERS = ["base", "whiteout", "twosite", "zstd", "develop", "rocmlink"]


@pytest.mark.parametrize("name", FAMILY + MEMBERS)
def test_inspect_agrees_with_the_probe_run_in_a_container(
    name: str, family: testenv.Family, members: dict[str, str], tmp_path: Path
) -> None:
    ref = members[name] if name in members else family[name].ref
    twin = members["twosite"] if name == "zstd" else ref  # the engine cannot unpack zstd
    static = inspect_json(tmp_path, ref)
    assert static["source"] == "registry"
    assert _facts(static) == _facts(container_probe(tmp_path, twin))


def test_whiteouts_and_a_second_site_directory_are_read_as_the_image_has_them(
    members: dict[str, str], tmp_path: Path
) -> None:
    whiteout = inspect_json(tmp_path, members["whiteout"])
    assert whiteout["distributions"]["amd-aiter"] == "0.1.14"
    assert whiteout["distributions"]["sglang"] == "0.5.9"
    assert [d["version"] for d in whiteout["locations"] if d["name"] == "amd-aiter"] == ["0.1.14"]
    twosite = inspect_json(tmp_path, members["twosite"])
    torches = [(d["version"], d["location"]) for d in twosite["locations"] if d["name"] == "torch"]
    assert torches == [
        ("2.9.0+rocm7.0.0", f"/{SITE}"),
        ("1.13.0", "/usr/lib/python3/dist-packages"),
    ]
    assert twosite["distributions"]["torch"] == "2.9.0+rocm7.0.0"
    rocm = inspect_json(tmp_path, members["rocmlink"])["rocm"]["version"]
    assert rocm == "7.2.1-99"  # through the /opt/rocm symlink, not the directory it replaced
    develop = inspect_json(tmp_path, members["develop"])
    assert develop["distributions"]["amd-aiter"] == "0.1.12.dev5+gabc1234"
    assert "/sgl-workspace/aiter" in develop["python"]["site_dirs"]
    (shim,) = develop["shims"]
    assert shim["would_apply"] is True and "shuffle_scale_a16w4" in shim["reason"]


def test_without_the_zstd_extra_a_zstd_layer_is_exit_2_naming_it_and_gzip_still_works(
    members: dict[str, str], tmp_path: Path
) -> None:
    """zstandard is the rocmenv[zstd] extra: where it is not installed (a module of that name
    that cannot be imported shadows the installed one), a zstd image is a usage error naming
    the extra, a gzip image reads as before, and nothing half-made stays cached."""
    absent = tmp_path / "no-zstandard"
    absent.mkdir()
    (absent / "zstandard.py").write_text("raise ImportError('no zstandard here (test)')\n")
    env = {"PYTHONPATH": str(absent)}
    done = rocmenv(tmp_path, "inspect", members["zstd"], "--json", env=env)
    assert done.returncode == 2, done.stderr
    assert "rocmenv[zstd]" in done.stderr and "Traceback" not in done.stderr
    assert rocmenv(tmp_path, "inspect", members["base"], "--json", env=env).returncode == 0
    assert inspect_json(tmp_path, members["zstd"])["source"] == "registry"  # with the extra


def test_diff_names_exactly_the_changed_distributions(
    members: dict[str, str], tmp_path: Path
) -> None:
    done = rocmenv(tmp_path, "diff", members["base"], members["whiteout"], "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [(p["name"], p["old"], p["new"], p["change"]) for p in doc["packages"]] == [
        ("amd-aiter", "0.1.9.post1", "0.1.14", "upgraded"),
        ("sglang", "0.5.8", "0.5.9", "upgraded"),
    ]
    (shim,) = doc["shims"]
    assert (shim["before"], shim["after"], shim["verdict"]) == (True, False, "retire")
    done = rocmenv(tmp_path, "diff", members["twosite"], members["zstd"], "--json")
    assert json.loads(done.stdout)["packages"] == []  # same files, other compression
    done = rocmenv(tmp_path, "diff", members["base"], members["twosite"], "--format", "markdown")
    assert done.returncode == 0, done.stderr
    assert "| `numpy` | — | 1.24.2 | added |" in done.stdout
    assert "torch" not in done.stdout  # the second torch is shadowed: no change


def test_a_sibling_costs_only_the_layers_not_yet_indexed(
    members: dict[str, str], tmp_path: Path
) -> None:
    with (
        FaultProxy(upstream="127.0.0.1:5000") as proxy,
        testenv.RegistryClient(host="127.0.0.1:5000") as client,
    ):

        def layers(ref: str) -> dict[str, int]:
            _, repo, tag = testenv.split_ref(ref)
            return {d["digest"]: d["size"] for d in client.get_manifest(repo, tag).json()["layers"]}

        def fetched() -> dict[str, int]:
            sizes = {**layers(members["base"]), **layers(members["whiteout"])}
            out: dict[str, int] = {}
            for entry in proxy.log:
                digest = entry.path.rsplit("/", 1)[-1]
                if entry.method == "GET" and "/blobs/" in entry.path and digest in sizes:
                    out[digest] = out.get(digest, 0) + sizes[digest]
            return out

        via = {k: v.replace("127.0.0.1:5000", proxy.host) for k, v in members.items()}
        first = inspect_json(tmp_path, via["base"])
        assert fetched() == layers(members["base"])  # cold: every layer once
        assert first["read"]["layers_read"] == len(layers(members["base"]))
        proxy.reset_log()
        inspect_json(tmp_path, via["whiteout"])
        new = {
            d: s for d, s in layers(members["whiteout"]).items() if d not in layers(members["base"])
        }
        assert len(new) == 2
        assert fetched() == new  # warm: only the two new layers crossed the proxy
        proxy.reset_log()
        again = inspect_json(tmp_path, via["whiteout"])
        assert fetched() == {} and again["read"]["bytes"] == 0


def test_inspect_streams_layers_from_a_token_auth_registry(
    auth_registry: testenv.AuthRegistry, docker_config_dir: Path, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "DOCKER_CONFIG": str(docker_config_dir),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    ref = f"{auth_registry.host}/{auth_registry.private_repo}:{auth_registry.private_tags[0]}"
    done = subprocess.run(
        [sys.executable, "-m", "rocmenv", "inspect", ref, "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["read"]["layers_read"] == doc["layers"] > 0
    assert doc["distributions"]["amd-aiter"] == "0.1.9.post1"
    anonymous = subprocess.run(
        [sys.executable, "-m", "rocmenv", "inspect", ref],
        cwd=tmp_path,
        env={
            **env,
            "DOCKER_CONFIG": str(tmp_path / "no-config"),
            "XDG_CACHE_HOME": str(tmp_path / "c2"),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert anonymous.returncode == 3, anonymous.stderr
    assert "Traceback" not in anonymous.stderr and auth_registry.password not in anonymous.stderr


def test_inspect_streams_over_tls_through_the_cdn_redirect_and_a_proxy(tmp_path: Path) -> None:
    """The TLS test bed with Docker Hub's habits: blobs answer 307 to a CDN host."""
    import time

    hub = testenv.HubTLS()
    problem = hub.problem()
    if problem:
        testenv.missing_environment(problem)
    ref = f"{hub.registry}/rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"
    base = {"PATH": os.environ["PATH"], "ROCMENV_TOKEN_CACHE": "0"}

    def run(home: str, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {**base, "HOME": str(tmp_path / home), **extra}
        return subprocess.run(
            [sys.executable, "-m", "rocmenv", "inspect", ref, "--json"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    def proxied() -> int:
        try:
            text = hub.proxy_log.read_text()
        except FileNotFoundError:
            return 0
        return sum("rocmenv.test" in line for line in text.splitlines())

    seq = hub.last_seq()
    done = run("a")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["distributions"]["amd-aiter"] == "0.1.9.post1"
    cdn = [e for e in hub.log(seq) if e["host"] == "cdn.rocmenv.test" and "/blobs/" in e["path"]]
    assert cdn and not any(e["authorization"] for e in cdn)  # no registry token to the CDN

    before = proxied()
    through = run("b", HTTPS_PROXY=f"http://{hub.proxy}")
    assert through.returncode == 0, through.stderr
    deadline = time.monotonic() + 60  # tinyproxy logs the tunnel once it closes: poll for it
    while proxied() <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proxied() > before

    untrusted = run("c", ROCMENV_CERTS_D=str(tmp_path))
    assert untrusted.returncode == 3 and "Traceback" not in untrusted.stderr
