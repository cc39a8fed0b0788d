"""A manifest's layer descriptors are checked before a digest names anything (a URL, a cache
file): a hostile manifest is a registry error (exit 3) naming the layer, never a path."""

from __future__ import annotations

from typing import Any

import pytest

from rocmenv.contents.fetch import LayerRef, layer_refs
from rocmenv.errors import RegistryProtocolError
from rocmenv.grammar.reference import parse

REF = parse("127.0.0.1:5000/x/y:latest")
GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
GOOD = {"mediaType": GZIP, "size": 10, "digest": "sha256:" + "a" * 64}


def test_valid_descriptors_become_layer_refs_in_order() -> None:
    other = {**GOOD, "digest": "sha512:" + "b" * 128, "size": 0}
    assert layer_refs({"layers": [GOOD, other]}, REF) == [
        LayerRef(digest=GOOD["digest"], media_type=GZIP, size=10),  # type: ignore[arg-type]
        LayerRef(digest=other["digest"], media_type=GZIP, size=0),  # type: ignore[arg-type]
    ]
    assert layer_refs({}, REF) == []


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([{**GOOD, "digest": "sha256:/some/path/planted"}], "is not a valid digest"),
        ([{**GOOD, "digest": "sha256:" + "a" * 64 + "/../x"}], "is not a valid digest"),
        ([{**GOOD, "digest": "md5:" + "a" * 32}], "is not a valid digest"),
        ([{**GOOD, "digest": 5}], "layer 0 of the manifest has no digest"),
        ([GOOD, "sha256:" + "a" * 64], "layer 1 of the manifest has no digest"),
        ([{**GOOD, "size": -1}], "no valid mediaType and size"),
        ([{**GOOD, "size": True}], "no valid mediaType and size"),
        ([{**GOOD, "size": "10"}], "no valid mediaType and size"),
        ([{**GOOD, "mediaType": 7}], "no valid mediaType and size"),
        ({"digest": GOOD["digest"]}, "layers are not a list"),
    ],
)
def test_a_hostile_descriptor_is_a_registry_error(layers: Any, message: str) -> None:
    with pytest.raises(RegistryProtocolError, match=message) as caught:
        layer_refs({"layers": layers}, REF)
    assert caught.value.exit_code == 3
