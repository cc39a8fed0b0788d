"""Layer indexes and their stacking (OCI whiteouts), read from in-memory layers."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterator, Mapping

import pytest
import zstandard

from rocmenv.contents.diff import diff_contents, render_markdown, render_text
from rocmenv.contents.image import distributions, find_python
from rocmenv.contents.layer import LayerIndexJson, index_layer
from rocmenv.contents.merge import merge
from rocmenv.errors import RegistryProtocolError

SITE = "usr/local/lib/python3.11/dist-packages"


def _tar(entries: Mapping[str, bytes | str]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, content in entries.items():
            info = tarfile.TarInfo(path)
            if isinstance(content, str):  # a symlink
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return raw.getvalue()


def _chunks(data: bytes, size: int = 7) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def _meta(name: str, version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: x\n\nlong text\n".encode()


def _index(entries: Mapping[str, bytes | str], compression: str = "gzip") -> LayerIndexJson:
    tar = _tar(entries)
    blob, media = {
        "gzip": (gzip.compress(tar), "application/vnd.docker.image.rootfs.diff.tar.gzip"),
        "zstd": (
            zstandard.ZstdCompressor().compress(tar),
            "application/vnd.oci.image.layer.v1.tar+zstd",
        ),
        "none": (tar, "application/vnd.oci.image.layer.v1.tar"),
    }[compression]
    return index_layer("sha256:" + "0" * 64, media, _chunks(blob), ["aiter.ops.shuffle"])


@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
def test_a_layer_keeps_only_metadata_headers_sources_and_markers(compression: str) -> None:
    index = _index(
        {
            f"./{SITE}/torch-2.0.dist-info/METADATA": _meta("torch", "2.0"),
            f"{SITE}/torch/__init__.py": b"big = 1\n",
            f"{SITE}/aiter/__init__.py": b"import torch\n",
            f"{SITE}/aiter/ops/shuffle.py": b"def shuffle_scale_a16w4(): ...\n",
            "opt/rocm/.info/version": b"7.0.0-38\n",
            "usr/bin/python3": "python3.11",
            "usr/lib/python3.11/os.py": b"# os\n",
            f"{SITE}/.wh.old-1.0.dist-info": b"",
            "etc/.wh..wh..opq": b"",
        },
        compression,
    )
    assert index["files"] == {
        f"{SITE}/torch-2.0.dist-info/METADATA": "Name: torch\nVersion: 2.0",
        f"{SITE}/aiter/__init__.py": "",
        f"{SITE}/aiter/ops/shuffle.py": "def shuffle_scale_a16w4(): ...\n",
        "opt/rocm/.info/version": "7.0.0-38\n",
        "usr/lib/python3.11/os.py": "",
    }
    assert index["links"] == {"usr/bin/python3": "python3.11"}
    assert index["whiteouts"] == [f"{SITE}/old-1.0.dist-info"]
    assert index["opaque"] == ["etc"]


def test_a_corrupt_layer_is_a_registry_error_not_a_traceback() -> None:
    with pytest.raises(RegistryProtocolError, match="not a readable"):
        index_layer(
            "sha256:" + "1" * 64,
            "application/vnd.oci.image.layer.v1.tar+gzip",
            iter([b"\x1f\x8bnot gzip at all"]),
            [],
        )
    with pytest.raises(RegistryProtocolError, match="media type"):
        index_layer("sha256:" + "1" * 64, "application/x-foreign", iter([b""]), [])


def test_whiteouts_and_opaque_directories_apply_to_lower_layers_only() -> None:
    base = _index(
        {
            "usr/bin/python3": "python3.11",
            "usr/lib/python3.11/os.py": b"",
            f"{SITE}/a-1.0.dist-info/METADATA": _meta("a", "1.0"),
            f"{SITE}/b-1.0.dist-info/METADATA": _meta("b", "1.0"),
            f"{SITE}/c-1.0.dist-info/METADATA": _meta("c", "1.0"),
            "usr/lib/python3/dist-packages/a-0.5.dist-info/METADATA": _meta("a", "0.5"),
        }
    )
    delete = _index({f"{SITE}/.wh.a-1.0.dist-info": b""})
    readd = _index(
        {
            f"{SITE}/a-2.0.dist-info/METADATA": _meta("a", "2.0"),
            f"{SITE}/b-1.0.dist-info/.wh..wh..opq": b"",
            f"{SITE}/b-1.0.dist-info/METADATA": _meta("b", "1.1"),
        }
    )
    merged = merge([base, delete])
    python = find_python(merged, {})
    dists = distributions(merged, python)
    assert [(d.name, d.version) for d in dists] == [("b", "1.0"), ("c", "1.0"), ("a", "0.5")]
    merged = merge([base, delete, readd])
    dists = distributions(merged, find_python(merged, {}))
    assert [(d.name, d.version, d.location) for d in dists] == [
        ("a", "2.0", f"/{SITE}"),
        ("b", "1.1", f"/{SITE}"),
        ("c", "1.0", f"/{SITE}"),
        ("a", "0.5", "/usr/lib/python3/dist-packages"),
    ]


def test_python_is_found_on_the_images_path_and_pythonpath_comes_first() -> None:
    layer = _index(
        {
            "usr/local/bin/python3": "python3.12",
            "usr/local/lib/python3.12/os.py": b"",
            "usr/local/include/python3.12/patchlevel.h": b'#define PY_VERSION "3.12.4"\n',
            "usr/bin/python3": "python3.11",
            "usr/lib/python3.11/os.py": b"",
        }
    )
    python = find_python(merge([layer]), {"PATH": "/usr/local/bin:/usr/bin", "PYTHONPATH": "/x"})
    assert (python.executable, python.path, python.version) == (
        "usr/local/bin/python3",
        "usr/local/bin/python3.12",
        "3.12.4",
    )
    assert python.site_dirs == (
        "x",
        "root/.local/lib/python3.12/site-packages",
        "usr/local/lib/python3.12/site-packages",
    )
    other = find_python(merge([layer]), {"PATH": "/usr/bin"})
    assert other.version == "3.11" and "usr/lib/python3/dist-packages" in other.site_dirs


def _doc(dists: dict[str, str], shim: bool | None, rocm: str = "7.0") -> dict[str, object]:
    return {
        "image": "img",
        "digest": "d",
        "rocm": {"version": rocm},
        "python": {"version": "3.11.2"},
        "distributions": dists,
        "shims": [{"name": "s", "would_apply": shim}],
    }


def test_diff_marks_major_minor_moves_and_retireable_shims() -> None:
    doc = diff_contents(
        _doc({"torch": "2.9.0", "aiter": "0.1.9", "gone": "1"}, True),
        _doc({"torch": "2.10.0", "aiter": "0.1.9.post1", "new": "2"}, False, "7.2"),
    )
    rows = {p["name"]: (p["change"], p["major_minor"]) for p in doc["packages"]}
    assert rows == {
        "aiter": ("upgraded", False),
        "gone": ("removed", False),
        "new": ("added", False),
        "torch": ("upgraded", True),
    }
    text = render_text(doc)
    assert "~ torch 2.9.0 → 2.10.0 ⇑" in text and "~ aiter 0.1.9 → 0.1.9.post1\n" in text
    assert "ROCm: 7.0 → 7.2" in text and "retire-able: s" in text
    md = render_markdown(doc)
    assert "| `torch` | 2.9.0 | 2.10.0 | upgraded ⇑ |" in md
    assert "| `s` | needed | not needed | **retire-able** |" in md


def test_egg_info_files_and_directories_are_distributions() -> None:
    layer = _index(
        {
            "usr/bin/python3": "python3.11",
            "usr/lib/python3.11/os.py": b"",
            f"{SITE}/foo-1.0-py3.11.egg-info": _meta("foo", "1.0"),
            f"{SITE}/bar-2.0-py3.11.egg-info/PKG-INFO": _meta("bar", "2.0"),
            f"{SITE}/bar-2.0-py3.11.egg-info/SOURCES.txt": b"x\n",
        }
    )
    merged = merge([layer])
    dists = distributions(merged, find_python(merged, {}))
    assert [(d.name, d.version) for d in dists] == [("bar", "2.0"), ("foo", "1.0")]


def test_the_layer_store_reads_a_layer_once_and_again_for_new_shim_targets(tmp_path) -> None:
    import threading

    from rocmenv.contents.store import LayerStore

    store = LayerStore(tmp_path)
    digest = "sha256:" + "2" * 64
    made: list[int] = []
    gate = threading.Event()

    def make() -> LayerIndexJson:
        gate.wait(5)
        made.append(1)
        index = _index({"opt/rocm/.info/version": b"7.0\n"})
        return {**index, "digest": digest, "targets": ["aiter.ops.shuffle"]}

    threads = [
        threading.Thread(target=store.index, args=(digest, ["aiter.ops.shuffle"], make))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert len(made) == 1  # four readers at once, one read
    assert store.get(digest, ["aiter.ops.shuffle"]) is not None
    assert store.get(digest, ["aiter.ops.shuffle", "other.module"]) is None  # made again
    assert [p.name for p in (tmp_path / "sha256").iterdir()] == ["2" * 64 + ".json"]


def test_editable_installs_are_followed_through_pth_files_and_editable_finders() -> None:
    from rocmenv.contents.image import _find_source

    layer = _index(
        {
            "usr/bin/python3": "python3.11",
            "usr/lib/python3.11/os.py": b"",
            f"{SITE}/easy-install.pth": b"# comment\nimport sys\n/src/a\n../../../../src/b\n",
            "src/a/a_pkg-1.0.egg-info/PKG-INFO": _meta("a-pkg", "1.0"),
            f"{SITE}/__editable___aiter_0_1_finder.py": b"import sys\nMAPPING = {'aiter': '/work/aiter/aiter'}\nNAMESPACES = {}\n",
            "work/aiter/aiter/__init__.py": b"",
            "work/aiter/aiter/ops/shuffle.py": b"def shuffle_scale(): ...\n",
        }
    )
    merged = merge([layer])
    python = find_python(merged, {})
    site = python.site_dirs.index(SITE)
    assert python.site_dirs[site + 1 : site + 3] == ("src/a", "usr/src/b")
    assert [(d.name, d.location) for d in distributions(merged, python)] == [("a-pkg", "/src/a")]
    assert _find_source(merged, python)("aiter.ops.shuffle") == "def shuffle_scale(): ...\n"


def test_symlinked_directories_are_followed_and_replace_what_was_there() -> None:
    from rocmenv.contents.merge import resolve

    base = _index(
        {
            "usr/bin/python3": "python3.11",
            "usr/lib/python3.11/os.py": b"",
            "opt/rocm/.info/version": b"6.4.0-1\n",
            f"{SITE}/old-1.0.dist-info/METADATA": _meta("old", "1.0"),
        }
    )
    upper = _index(
        {
            "opt/rocm": "rocm-7.0.0",  # the directory becomes a symlink, as in ROCm images
            "opt/rocm-7.0.0/.info/version": b"7.0.0-38\n",
            SITE: "/opt/venv-site",  # the site directory moved elsewhere
            "opt/venv-site/new-2.0.dist-info/METADATA": _meta("new", "2.0"),
        }
    )
    merged = merge([base, upper])
    assert "opt/rocm/.info/version" not in merged.files  # replaced with the directory
    assert merged.files[resolve(merged, "opt/rocm/.info/version")] == "7.0.0-38\n"
    dists = distributions(merged, find_python(merged, {}))
    assert [(d.name, d.version, d.location) for d in dists] == [("new", "2.0", f"/{SITE}")]
