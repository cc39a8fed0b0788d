"""Stacking layer indexes: the linear merge gives exactly what the scan-every-path merge it
replaced gave (same entries, same order), on random layer stacks with whiteouts, opaque
directories and files replacing directories."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from rocmenv.contents.layer import INDEX_VERSION, LayerIndexJson
from rocmenv.contents.merge import Merged, merge


def scan_merge(layers: Sequence[LayerIndexJson]) -> Merged:
    """The merge before issue 22, quadratic (every path scanned per whiteout and per entry):
    the reference for what stacking means."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for layer in layers:
        for table in (files, links):
            for gone in layer["whiteouts"]:
                prefix = gone + "/"
                for path in [p for p in table if p == gone or p.startswith(prefix)]:
                    del table[path]
            for directory in layer["opaque"]:
                prefix = directory + "/" if directory else ""
                for path in [p for p in table if p.startswith(prefix)]:
                    del table[path]
        for path in [*layer["files"], *layer["links"]]:
            prefix = path + "/"
            for table in (files, links):
                for gone in [p for p in table if p.startswith(prefix)]:
                    del table[gone]
        for path, text in layer["files"].items():
            links.pop(path, None)
            files[path] = text
        for path, target in layer["links"].items():
            files.pop(path, None)
            links[path] = target
    return Merged(files=files, links=links)


def layer(
    files: dict[str, str] | None = None,
    links: dict[str, str] | None = None,
    whiteouts: list[str] | None = None,
    opaque: list[str] | None = None,
) -> LayerIndexJson:
    return {
        "index_version": INDEX_VERSION,
        "digest": "sha256:" + "0" * 64,
        "media_type": "application/vnd.oci.image.layer.v1.tar",
        "targets": [],
        "files": files or {},
        "links": links or {},
        "whiteouts": whiteouts or [],
        "opaque": opaque or [],
        "bytes": 0,
        "size": 0,
    }


# short components so that paths collide, nest and replace each other often; "" too
_part = st.sampled_from(["a", "b", "c", "a.b", ""])
_path = st.lists(_part, min_size=1, max_size=4).map("/".join)
_layers = st.lists(
    st.builds(
        layer,
        files=st.dictionaries(_path, st.sampled_from(["x", "y", ""]), max_size=6),
        links=st.dictionaries(_path, st.sampled_from(["t", "/u"]), max_size=3),
        whiteouts=st.lists(_path, max_size=3),
        opaque=st.lists(st.one_of(_path, st.just("")), max_size=2),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=400, deadline=None)
@given(_layers)
def test_the_linear_merge_equals_the_scanning_merge_entries_and_order(
    layers: list[LayerIndexJson],
) -> None:
    want, got = scan_merge(layers), merge(layers)
    assert list(got.files.items()) == list(want.files.items())
    assert list(got.links.items()) == list(want.links.items())


def test_whiteouts_opaque_markers_and_replaced_directories() -> None:
    base = layer(
        files={"usr/a/x": "1", "usr/a/y": "2", "usr/ab": "3", "etc/c": "4", "opt/d/e": "5"},
        links={"usr/a/l": "x"},
    )
    upper = layer(
        files={"opt/d": "now a file", "etc/new": "6"},
        whiteouts=["usr/a"],
        opaque=["etc"],
    )
    merged = merge([base, upper])
    assert merged.files == {"usr/ab": "3", "opt/d": "now a file", "etc/new": "6"}
    assert merged.links == {}
    everything = merge([base, layer(opaque=[""], files={"z": "0"})])
    assert (everything.files, everything.links) == ({"z": "0"}, {})


def test_two_layers_of_20000_metadata_files_stack_without_losing_any() -> None:
    site = "usr/local/lib/python3.11/dist-packages"
    first = layer(files={f"{site}/a{i}-1.0.dist-info/METADATA": "v1" for i in range(20000)})
    second = layer(
        files={f"{site}/b{i}-1.0.dist-info/METADATA": "v2" for i in range(20000)},
        whiteouts=[f"{site}/a{i}-1.0.dist-info" for i in range(0, 20000, 2)],
    )
    merged = merge([first, second])
    assert len(merged.files) == 30000
    assert f"{site}/a1-1.0.dist-info/METADATA" in merged.files
    assert f"{site}/a2-1.0.dist-info/METADATA" not in merged.files
