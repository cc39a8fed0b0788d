"""KFD topology parsing and --gpus selection on fake host trees."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmenv.container.gpu import discover, family_mismatch, gfx_target_name, parse_gpus, select
from rocmenv.errors import GpuSelectionError
from tests.support.fakegpu import MI355X, FakeHost, build_fake_host


@pytest.mark.parametrize(
    ("version", "name"),
    [
        (90402, "gfx942"),
        (90500, "gfx950"),
        (110501, "gfx1151"),
        (90010, "gfx90a"),
        (90008, "gfx908"),
        (110000, "gfx1100"),
        (100300, "gfx1030"),
        (120001, "gfx1201"),
    ],
)
def test_gfx_target_version_decodes_to_the_gfx_name(version: int, name: str) -> None:
    assert gfx_target_name(version) == name


def test_gfx_target_version_zero_is_not_a_gpu() -> None:
    with pytest.raises(ValueError):
        gfx_target_name(0)


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return build_fake_host(tmp_path, char_devices=False)


def test_discovery_orders_gpus_by_pci_address_not_by_kfd_node(host: FakeHost) -> None:
    inv = discover(host.sysfs_root, host.dev_root)
    assert [g.pci_address for g in inv.gpus] == sorted(g.pci_address for g in inv.gpus)
    assert [g.index for g in inv.gpus] == list(range(8))
    # the fake host probes the second socket first: node numbers differ from indices
    assert [g.node for g in inv.gpus] != sorted(g.node for g in inv.gpus)
    for gpu, fake in zip(inv.gpus, host.gpus, strict=True):
        assert gpu.pci_address == fake.pci_address
        assert gpu.node == fake.node
        assert gpu.render_node == host.dev_root / "dri" / fake.render_name
        assert gpu.card_node == host.dev_root / "dri" / fake.card_name
        assert gpu.uuid == fake.uuid
        assert gpu.gfx == "gfx942"
    assert inv.kfd_present
    assert inv.gfx_targets == ("gfx942",)


def test_discovery_skips_cpu_nodes_and_the_bmc_card(host: FakeHost) -> None:
    inv = discover(host.sysfs_root, host.dev_root)
    assert len(inv.gpus) == 8
    assert all(g.card_node is None or g.card_node.name != "card0" for g in inv.gpus)


def test_discovery_without_drm_sysfs_uses_location_id_and_has_no_cards(tmp_path: Path) -> None:
    host = build_fake_host(tmp_path, char_devices=False, with_drm_sysfs=False)
    inv = discover(host.sysfs_root, host.dev_root)
    assert [g.pci_address for g in inv.gpus] == [g.pci_address for g in host.gpus]
    assert all(g.card_node is None for g in inv.gpus)


def test_discovery_notes_a_gpu_node_without_render_minor(host: FakeHost) -> None:
    props = host.sysfs_root / "class/kfd/kfd/topology/nodes/2/properties"
    props.write_text(props.read_text().replace("drm_render_minor 128", "drm_render_minor -1"))
    inv = discover(host.sysfs_root, host.dev_root)
    assert len(inv.gpus) == 7
    assert any("KFD node 2" in n for n in inv.notes)


def test_discovery_of_a_host_without_gpus_is_empty(tmp_path: Path) -> None:
    inv = discover(tmp_path / "sys", tmp_path / "dev")
    assert inv.gpus == ()
    assert not inv.kfd_present
    assert not inv.topology_present


def test_mi355x_host_is_gfx950(tmp_path: Path) -> None:
    host = build_fake_host(tmp_path, char_devices=False, gfx_target_version=MI355X, gpus=4)
    inv = discover(host.sysfs_root, host.dev_root)
    assert {g.gfx for g in inv.gpus} == {"gfx950"}
    assert len(inv.gpus) == 4


def test_json_lists_every_gpu_with_its_nodes(host: FakeHost) -> None:
    data = discover(host.sysfs_root, host.dev_root).to_json()
    assert data["kfd"] == str(host.dev_root / "kfd")
    first = data["gpus"][0]  # type: ignore[index]
    assert first["index"] == 0
    assert first["pci_address"] == host.gpus[0].pci_address
    assert first["render_node"].endswith(host.gpus[0].render_name)


# -- selection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "indices"),
    [
        ("0,1", (0, 1)),
        ("0-3", (0, 1, 2, 3)),
        ("4-7", (4, 5, 6, 7)),
        (" 2 , 5 ", (2, 5)),
        ("0-1,6", (0, 1, 6)),
        ("7", (7,)),
    ],
)
def test_select_by_indices_and_ranges(host: FakeHost, text: str, indices: tuple[int, ...]) -> None:
    inv = discover(host.sysfs_root, host.dev_root)
    assert select(parse_gpus(text), inv).indices == indices


def test_select_by_uuid_in_every_spelling(host: FakeHost) -> None:
    inv = discover(host.sysfs_root, host.dev_root)
    fake = host.gpus[5]
    hexid = f"{fake.unique_id:016x}"
    for text in (fake.uuid, fake.uuid.lower(), "0x" + hexid.upper(), hexid):
        assert select(parse_gpus(text), inv).indices == (5,)


def test_select_by_pci_address_with_or_without_domain(host: FakeHost) -> None:
    inv = discover(host.sysfs_root, host.dev_root)
    pci = host.gpus[3].pci_address
    assert select(parse_gpus(pci), inv).indices == (3,)
    assert select(parse_gpus(pci[5:].upper()), inv).indices == (3,)


def test_all_and_none(host: FakeHost) -> None:
    inv = discover(host.sysfs_root, host.dev_root)
    assert select(parse_gpus("all"), inv).indices == tuple(range(8))
    assert select(parse_gpus("NONE"), inv).kind == "none"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("0,,1", "empty item"),
        ("1-", "not an index"),
        ("3-1", "runs backwards"),
        ("gpu0", "not an index"),
        ("all,1", "cannot be combined"),
        ("-1", "not an index"),
        ("1.5", "not an index"),
    ],
)
def test_malformed_gpus_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(GpuSelectionError) as info:
        parse_gpus(text)
    assert message in str(info.value)
    assert info.value.exit_code == 2
    assert info.value.hint


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("8", "GPU index 8 is out of range; this host has 8 GPUs (0-7)"),
        ("6-9", "GPU index 8 is out of range"),
        ("0,0", "GPU 0 is selected twice"),
        ("0-3,2", "GPU 2 is selected twice"),
        ("GPU-0123456789abcdef", "no GPU has UUID"),
        ("0000:07:00.0", "no GPU at PCI address 0000:07:00.0"),
    ],
)
def test_selection_that_does_not_match_the_host_is_refused(
    host: FakeHost, text: str, message: str
) -> None:
    inv = discover(host.sysfs_root, host.dev_root)
    with pytest.raises(GpuSelectionError) as info:
        select(parse_gpus(text), inv)
    assert message in str(info.value)


def test_uuid_and_index_of_the_same_gpu_is_a_duplicate(host: FakeHost) -> None:
    inv = discover(host.sysfs_root, host.dev_root)
    with pytest.raises(GpuSelectionError, match="selected twice"):
        select(parse_gpus(f"1,{host.gpus[1].uuid}"), inv)


@pytest.fixture(scope="module")
def shared_host(tmp_path_factory: pytest.TempPathFactory) -> FakeHost:
    return build_fake_host(tmp_path_factory.mktemp("fakegpu"), char_devices=False)


@settings(max_examples=200, deadline=None)
@given(indices=st.lists(st.integers(min_value=0, max_value=7), min_size=1, max_size=8, unique=True))
def test_any_list_of_distinct_indices_selects_exactly_those(
    shared_host: FakeHost, indices: list[int]
) -> None:
    host = shared_host
    inv = discover(host.sysfs_root, host.dev_root)
    chosen = select(parse_gpus(",".join(map(str, indices))), inv)
    assert chosen.indices == tuple(indices)
    assert {g.pci_address for g in chosen.gpus} == {host.gpus[i].pci_address for i in indices}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789-,abcdefGPUx: .", max_size=20))
def test_parsing_arbitrary_text_only_ever_raises_a_selection_error(text: str) -> None:
    with contextlib.suppress(GpuSelectionError):
        request = parse_gpus(text)
        assert request.kind in ("all", "none", "subset")


def test_family_mismatch_warns_for_mi35x_image_on_mi300x(host: FakeHost) -> None:
    inv = discover(host.sysfs_root, host.dev_root)
    warning = family_mismatch("mi35x", inv)
    assert warning is not None and "gfx950" in warning and "gfx942" in warning
    assert family_mismatch("mi30x", inv) is None
    assert family_mismatch(None, inv) is None
    assert family_mismatch("gfx1151-something", inv) is None


def test_gpus_command_lists_the_host(host: FakeHost, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    env = {"PATH": os.environ.get("PATH", ""), **host.env()}
    done = subprocess.run(
        [sys.executable, "-m", "rocmenv", "gpus", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [g["pci_address"] for g in data["gpus"]] == [g.pci_address for g in host.gpus]
    table = subprocess.run(
        [sys.executable, "-m", "rocmenv", "gpus"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["INDEX", "GFX", "PCI", "UUID", "RENDER", "CARD", "KFD-NODE", "POOL"]
    assert lines[1].split()[:4] == ["0", "gfx942", host.gpus[0].pci_address, host.gpus[0].uuid]
    empty = subprocess.run(
        [sys.executable, "-m", "rocmenv", "gpus"], cwd=tmp_path, capture_output=True, text=True, check=False,
        env={"PATH": env["PATH"], "ROCMENV_SYSFS_ROOT": str(tmp_path / "none"), "ROCMENV_DEV_ROOT": str(tmp_path)},
    )  # fmt: skip
    assert empty.returncode == 0 and "no AMD GPUs found" in empty.stderr
