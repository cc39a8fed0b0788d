"""The test environment is what it claims: family images, tag set, auth registry, stand-ins.

These run against the real engine and registries that ``scripts/setup.sh`` starts; every
other integration test relies on what is proven here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import tagset as tagset_mod
from tests.support import testenv
from tests.support.testenv import RegistryHTTPError

FAMILY = testenv.load_family()

# Runs inside a family image (Python 3.8+ stdlib) and reports what the image contains.
PROBE = textwrap.dedent(
    """
    import json, os, subprocess, sys
    import importlib.metadata as md
    out = {"python": "%d.%d" % sys.version_info[:2], "dists": {}}
    for name in ("torch", "amd-aiter", "aiter", "sglang", "transformer-engine", "megatron-core"):
        try:
            out["dists"][name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    import aiter._version, aiter.ops.shuffle as shuffle
    out["aiter_file_version"] = aiter._version.__version__
    out["has_shuffle_scale"] = hasattr(shuffle, "shuffle_scale")
    out["has_shuffle_scale_a16w4"] = hasattr(shuffle, "shuffle_scale_a16w4")
    src = open(shuffle.__file__).read()
    out["source_defines_shuffle_scale"] = "def shuffle_scale(" in src
    out["rocm_info"] = open("/opt/rocm/.info/version").read().strip()
    smi = subprocess.run(["rocm-smi"], stdout=subprocess.PIPE, universal_newlines=True)
    out["rocm_smi_rc"] = smi.returncode
    out["rocm_smi_lines"] = len(smi.stdout.splitlines())
    out["pythonpath"] = os.environ.get("PYTHONPATH")
    try:
        import image_site_marker
        out["image_site_marker"] = image_site_marker.MARKER
    except ImportError:
        out["image_site_marker"] = None
    print(json.dumps(out))
    """
)

pytestmark = pytest.mark.integration  # the real engine and registries


def docker(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        ["docker", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} -> {proc.returncode}\n{proc.stderr}")
    return proc.stdout if check else proc.stdout + proc.stderr


# --------------------------------------------------------------------------- family


@pytest.mark.parametrize("name", FAMILY.names)
def test_family_image_is_in_registry_with_the_claimed_contents(
    name: str, family: testenv.Family, registry: testenv.OpenRegistry
) -> None:
    image = family[name]
    with registry.client() as client:
        digests = {tag: client.head_manifest(image.repository, tag) for tag in image.tags}
        manifest = client.get_manifest(image.repository, image.tag)
    assert all(digests.values()), f"tags missing from {registry.host}: {digests}"
    assert len(set(digests.values())) == 1, (
        f"tags of one image point at different digests: {digests}"
    )
    local_id = json.loads(docker("image", "inspect", image.ref))[0]["Id"]
    assert manifest.json()["config"]["digest"] == local_id, "registry holds another build"

    report = json.loads(docker("run", "--rm", image.ref, "python3", "-c", PROBE))
    assert report["python"] == image.python
    assert report["dists"] == image.distributions
    assert report["aiter_file_version"] == image.aiter_version
    assert report["has_shuffle_scale"] is image.has_shuffle_scale
    assert report["source_defines_shuffle_scale"] is image.has_shuffle_scale
    assert report["has_shuffle_scale_a16w4"] is True
    assert report["rocm_info"] == image.rocm_build
    assert report["rocm_smi_rc"] == 0 and report["rocm_smi_lines"] > 8
    assert report["pythonpath"] == image.env.get("PYTHONPATH")
    assert report["image_site_marker"] == ("image-site" if "PYTHONPATH" in image.env else None)


def test_family_covers_every_base_python_and_both_layouts(family: testenv.Family) -> None:
    for python in ("3.9", "3.11", "3.13"):
        for layout in ("old", "new"):
            assert family.select(python=python, layout=layout), (python, layout)
    assert family["sgl-old-name"].aiter_dist == "aiter"
    backport = family["aiter-backport"]
    assert backport.layout == "new" and backport.aiter_version == "0.1.13.post1"
    assert family["demo"].ref == "127.0.0.1:5000/rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"


def test_family_tags_are_consistent_with_the_tag_set(
    family: testenv.Family, tagset: tagset_mod.TagSet
) -> None:
    for image in family.select(repository=testenv.SGL_DEV_REPO):
        for tag in image.tags:
            expected = tagset[tag]
            assert expected.family in ("nightly", "floating"), tag
            if expected.sglang is not None:
                assert expected.sglang == image.sglang_version, tag
            assert expected.gpu == image.gpu_family, tag


@pytest.mark.parametrize("key", ["py39", "py311", "py313"])
def test_base_image_has_debian_sitecustomize_and_dist_packages_on_path(
    key: str, family: testenv.Family
) -> None:
    base = family.bases[key]
    out = docker(
        "run",
        "--rm",
        base.image,
        "python3",
        "-c",
        "import sys, sitecustomize; print(sitecustomize.__file__); print('\\n'.join(sys.path))",
    )
    lines = out.splitlines()
    assert lines[0].startswith(f"/usr/lib/python{base.python}/sitecustomize.py"), lines[0]
    assert base.site_packages in lines[1:]


# --------------------------------------------------------------------------- stand-ins


def test_standin_aiter_records_calls_from_every_process(
    family: testenv.Family, tmp_path: Path
) -> None:
    script = textwrap.dedent(
        """
        import subprocess, sys, torch
        from aiter.ops.shuffle import shuffle_scale_a16w4
        from aiter.utility.fp4_utils import e8m0_shuffle
        t = torch.empty(256, 8, dtype=torch.float8_e8m0fnu)
        r = shuffle_scale_a16w4(t, 4, gate_up=True)
        assert r.shape == t.shape and r.produced_by == "aiter.ops.shuffle.shuffle_scale_a16w4"
        subprocess.run([sys.executable, "-c",
            "import torch; from aiter.utility.fp4_utils import e8m0_shuffle;"
            "e8m0_shuffle(torch.empty(256, 8, dtype=torch.uint8))"], check=True)
        """
    )
    image = family["aiter-old-py39"]
    docker(
        "run", "--rm", "-v", f"{tmp_path}:/log", "-e", "ROCMENV_STANDIN_LOG=/log/calls.jsonl",
        image.ref, "python3", "-c", script,
    )  # fmt: skip
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["fn"] for c in calls] == [
        "aiter.ops.shuffle.shuffle_scale_a16w4",
        "aiter.utility.fp4_utils.e8m0_shuffle",
    ]
    assert calls[0]["args"][1:] == ["4"] and calls[0]["kwargs"] == {"gate_up": "True"}
    assert calls[0]["pid"] != calls[1]["pid"]
    assert {(c["layout"], c["version"]) for c in calls} == {("old", image.aiter_version)}


def test_standin_new_layout_dispatches_like_the_real_shuffle_scale(family: testenv.Family) -> None:
    script = textwrap.dedent(
        """
        import torch
        from aiter.ops.shuffle import shuffle_scale, shuffle_scale_a16w4
        from aiter.utility.fp4_utils import e8m0_shuffle
        t = torch.empty(512, 8, dtype=torch.float8_e8m0fnu)
        assert shuffle_scale(None) is None
        f = torch.empty(4, 4, dtype=torch.float32)
        assert shuffle_scale(f) is f
        assert shuffle_scale(t).via == ("aiter.ops.shuffle.shuffle_scale",)
        assert shuffle_scale(t, 2, True, False).shape == t.shape
        try:
            shuffle_scale(t, is_guinterleave=True)
        except ValueError:
            pass
        else:
            raise SystemExit("no ValueError without experts_cnt")
        assert e8m0_shuffle(t).via == ("aiter.utility.fp4_utils.e8m0_shuffle", "aiter.ops.shuffle.shuffle_scale")
        assert shuffle_scale_a16w4(t, 2, False).via[-1] == "aiter.ops.shuffle.shuffle_scale"
        print("ok")
        """
    )
    for name in ("aiter-new-py39", "aiter-new-py313"):
        assert docker("run", "--rm", family[name].ref, "python3", "-c", script).strip() == "ok"


# --------------------------------------------------------------------------- tag set


def test_registry_holds_exactly_the_generated_tag_set(
    registry: testenv.OpenRegistry, tagset: tagset_mod.TagSet
) -> None:
    tags = registry.tags(testenv.SGL_DEV_REPO)
    assert len(tags) == len(set(tags))
    assert set(tags) == set(tagset.tags)
    assert 2500 <= len(tags) <= 3500


def test_tag_set_has_every_family_and_junk_share_about_two_percent(
    tagset: tagset_mod.TagSet,
) -> None:
    counts = {f: len(tagset.by_family(f)) for f in ("nightly", "release", "floating", "date-only")}
    assert all(n > 50 for n in counts.values()), counts
    junk = len(tagset.by_family("unknown"))
    assert 0.01 <= junk / len(tagset) <= 0.03
    grammar = re.compile(r"^[\w][\w.-]{0,127}$")
    assert all(grammar.match(t) for t in tagset.tags)
    assert tagset_mod.generate_tags() == tagset.tags  # deterministic
    for e in tagset.by_family("nightly"):
        assert e.date is not None and e.sglang == tagset_mod.sglang_at(e.date), e.tag
    assert {e.rocm for e in tagset if e.rocm} >= {"6.3", "7.0", "7.2", "7.2.4", "10.0"}
    assert {e.gpu for e in tagset if e.gpu} >= {"mi30x", "mi35x", "mi45x", "gfx1151"}


def test_tag_set_index_tags_are_indexes_with_a_linux_amd64_manifest(
    registry: testenv.OpenRegistry, tagset: tagset_mod.TagSet
) -> None:
    index_tag = next(e.tag for e in tagset if e.index)
    plain = [e.tag for e in tagset.by_family("nightly")[:2]]
    with registry.client() as client:
        index = client.get_manifest(testenv.SGL_DEV_REPO, index_tag)
        assert index.media_type == testenv.MT_OCI_INDEX
        platforms = {
            (m["platform"]["os"], m["platform"]["architecture"]): m["digest"]
            for m in index.json()["manifests"]
        }
        amd64 = client.get_manifest(testenv.SGL_DEV_REPO, platforms[("linux", "amd64")])
        assert amd64.media_type == testenv.MT_OCI_MANIFEST
        digests = [client.get_manifest(testenv.SGL_DEV_REPO, t).digest for t in plain]
    assert len(set(digests)) == 2, "each stand-in tag has its own digest"


# --------------------------------------------------------------------------- auth registry


def test_auth_registry_rejects_anonymous_push_and_private_pull(
    auth_registry: testenv.AuthRegistry,
) -> None:
    with auth_registry.client(anonymous=True) as anon:
        with pytest.raises(RegistryHTTPError) as push:
            anon.upload_blob(auth_registry.private_repo, b"anonymous bytes")
        assert push.value.status == 401
        with pytest.raises(RegistryHTTPError) as pull:
            anon.get_manifest(auth_registry.private_repo, auth_registry.private_tags[0])
        assert pull.value.status == 401
        assert anon.head_manifest(auth_registry.public_repo, auth_registry.public_tags[0])


def test_auth_registry_accepts_the_test_credentials(
    auth_registry: testenv.AuthRegistry, family: testenv.Family, scratch_repo: str
) -> None:
    with auth_registry.client() as client:
        assert set(auth_registry.private_tags) <= set(client.list_tags(auth_registry.private_repo))
    digest = auth_registry.push_manifest_copy(family["aiter-old-py311"].ref, scratch_repo, "t1")
    with auth_registry.client() as client:
        assert client.head_manifest(scratch_repo, "t1") == digest


def test_auth_registry_token_server_refuses_a_wrong_password(
    auth_registry: testenv.AuthRegistry,
) -> None:
    wrong = testenv.RegistryClient(
        host=auth_registry.host, username=auth_registry.username, password="not-the-password"
    )
    with wrong, pytest.raises(RegistryHTTPError) as err:
        wrong.list_tags(auth_registry.private_repo)
    assert err.value.status == 401 and auth_registry.realm in err.value.url


def test_docker_config_dir_lets_the_docker_cli_pull_from_the_auth_registry(
    auth_registry: testenv.AuthRegistry, docker_config_dir: Path, tmp_path: Path
) -> None:
    ref = auth_registry.ref(auth_registry.private_repo, auth_registry.private_tags[0])
    empty = tmp_path / "empty-config"
    empty.mkdir()
    denied = docker("pull", "-q", ref, env={"DOCKER_CONFIG": str(empty)}, check=False)
    assert "unauthorized" in denied.lower() or "denied" in denied.lower(), denied
    try:
        docker("pull", "-q", ref, env={"DOCKER_CONFIG": str(docker_config_dir)})
    finally:
        docker("image", "rm", ref, check=False)


# --------------------------------------------------------------------------- helpers


def test_push_manifest_copy_moves_a_tag_without_touching_shared_tags(
    registry: testenv.OpenRegistry, family: testenv.Family, scratch_repo: str
) -> None:
    shared_before = registry.digest(family["demo"].repository, family["demo"].tag)
    first = registry.push_manifest_copy(family["demo"].ref, scratch_repo, "floating")
    assert registry.digest(scratch_repo, "floating") == first == shared_before
    moved = registry.push_manifest_copy(family["sgl-new"].ref, scratch_repo, "floating")
    assert moved != first
    assert registry.digest(scratch_repo, "floating") == moved
    assert registry.digest(family["demo"].repository, family["demo"].tag) == shared_before
    index_tag = next(e.tag for e in tagset_mod.generate_tagset() if e.index)
    copied = registry.push_manifest_copy(
        registry.ref(testenv.SGL_DEV_REPO, index_tag), scratch_repo, "index"
    )
    assert copied == registry.digest(testenv.SGL_DEV_REPO, index_tag)


def test_unique_repo_names_are_valid_and_distinct() -> None:
    names = {testenv.unique_repo("Moved Tag!") for _ in range(50)}
    assert len(names) == 50
    assert all(re.fullmatch(r"rocmenv-test/moved-tag-[0-9a-f]{8}", n) for n in names)


# --------------------------------------------------------------------------- the skip/fail rule


@pytest.mark.parametrize("require", ["", "1"])
def test_missing_engine_skips_or_fails_by_rocmenv_require_engine(
    require: str, tmp_path: Path
) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import pytest\npytestmark = pytest.mark.integration\n\n"
        "def test_needs_engine():\n    pass\n"
    )
    env = {
        **os.environ,
        "DOCKER_HOST": f"unix://{tmp_path}/no-such.sock",
        "ROCMENV_REQUIRE_ENGINE": require,
    }
    root = testenv.REPO_ROOT
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "-c", str(root / "pyproject.toml"), "--rootdir", str(root), str(probe)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(root)},
        cwd=tmp_path,
        timeout=120,
        check=False,
    )  # fmt: skip
    if require:
        assert proc.returncode == 1, proc.stdout
        assert "ROCMENV_REQUIRE_ENGINE is set" in proc.stdout
        assert "no-such.sock" in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout
        assert "1 skipped" in proc.stdout
