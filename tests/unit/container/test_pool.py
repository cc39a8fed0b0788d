"""The GPU pool (issue 30, item 5): an ARC runner pod's device list (``--device`` flags as
``/etc/podinfo/gha-render-devices`` holds them, or plain paths), ``gpus-from``, GPUs whose
nodes are absent, ``--gpus`` by render node path — and the list as hostile input."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rocmenv.container.builder import build_runspec
from rocmenv.container.gpu import parse_gpus, select
from rocmenv.container.guard import Guard
from rocmenv.container.pool import MAX_LIST_BYTES, host_inventory, read_device_list
from rocmenv.container.runspec import HostFacts, Overrides
from rocmenv.context import Context
from rocmenv.errors import ConfigError, GpuSelectionError
from rocmenv.settings.host import PODINFO_DEVICES, HostSettings
from rocmenv.settings.profiles import BUILTIN_PROFILES
from rocmenv.settings.resolve import settings_for
from tests.support.fakegpu import FakeHost, FakePod, build_fake_host, fake_pod


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return build_fake_host(tmp_path / "host", char_devices=False)


@pytest.fixture
def pod(host: FakeHost) -> FakePod:
    return fake_pod(host, (2, 5))


def settings_of(pod: FakePod, **changes: object) -> HostSettings:
    base = HostSettings(sysfs_root=pod.host.sysfs_root, dev_root=pod.host.dev_root,
                        podinfo_devices=pod.podinfo)  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def listed(path: Path, text: str | bytes, dev: Path) -> frozenset[str] | None:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return read_device_list(path, dev, setting="gpus-from").names


# -- the file format ------------------------------------------------------------------------


def test_every_spelling_of_the_pods_list_names_the_same_nodes(tmp_path: Path) -> None:
    dev = Path("/dev")
    want = frozenset({"renderD128", "renderD136"})
    for text in (
        "--device /dev/dri/renderD128 --device /dev/dri/renderD136",  # sglang's annotation
        "--device=/dev/dri/renderD128 --device=/dev/dri/renderD136\n",
        "--device\n/dev/dri/renderD128\n--device /dev/dri/renderD136",  # split over lines
        "# the pod's GPUs\n/dev/dri/renderD128\n/dev/dri/renderD136  # second\n",  # plain paths
        "\t--device /dev/dri/renderD128\r\n/dev/dri/renderD136 /dev/dri/renderD128\r\n",
    ):
        assert listed(tmp_path / "list", text, dev) == want, text
    assert listed(tmp_path / "list", "--device /dev/dri/card1", dev) == frozenset({"card1"})
    # a pod not pinned to GPUs: every GPU present
    assert listed(tmp_path / "list", "--device /dev/dri", dev) is None


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("--device /dev/dri/renderD128\n--privileged\n", 2, "--privileged"),
        ("--device /dev/dri/renderD128 --cpuset-cpus 0-23", 1, "--cpuset-cpus"),
        ("--device /dev/sda", 1, "/dev/sda"),
        ("--device=/dev/kfd", 1, "/dev/kfd"),
        ("/dev/dri/renderD128:/dev/dri/renderD128:rwm", 1, "maps a device"),
        ("--device /dev/dri/../sda", 1, "/dev/dri/../sda"),
        ("--device /elsewhere/dri/renderD128", 1, "/elsewhere"),
        ("/dev/dri/renderD128x", 1, "renderD128x"),
        ("\n\n--device", 3, "without a path"),
        ("renderD128", 1, "renderD128"),
        (b"/dev/dri/renderD128\n\xff\xfe\n", 2, "UTF-8"),
    ],
)  # fmt: skip
def test_anything_but_a_render_or_card_node_is_refused_with_file_and_line(
    tmp_path: Path, text: str | bytes, line: int, what: str
) -> None:
    path = tmp_path / "gha-render-devices"
    with pytest.raises(ConfigError) as err:
        listed(path, text, Path("/dev"))
    assert err.value.what.startswith(f"{path}:{line}: ") and what in err.value.what
    assert err.value.exit_code == 2


def test_a_list_larger_than_the_cap_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big"
    line = b"--device /dev/dri/renderD128\n"
    path.write_bytes(line * (MAX_LIST_BYTES // len(line) + 1))
    with pytest.raises(ConfigError, match="larger than 64 KiB"):
        read_device_list(path, Path("/dev"), setting="gpus-from")
    path.write_bytes(line * (MAX_LIST_BYTES // len(line)))  # just under: read
    assert read_device_list(path, Path("/dev"), setting="gpus-from").names == frozenset(
        {"renderD128"}
    )


def test_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_device_list(fifo, Path("/dev"), setting="gpus-from")
        except ConfigError as err:
            done.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert done and "not a regular file" in str(done[0])
    with pytest.raises(ConfigError, match="not a regular file"):
        read_device_list(tmp_path, Path("/dev"), setting="gpus-from")


def test_the_downward_apis_link_to_the_file_is_followed(tmp_path: Path) -> None:
    data = tmp_path / "..2026_01_01" / "gha-render-devices"
    data.parent.mkdir()
    data.write_text("--device /dev/dri/renderD130\n")
    link = tmp_path / "gha-render-devices"
    link.symlink_to(data.relative_to(tmp_path))
    assert read_device_list(link, Path("/dev"), setting="podinfo-devices").names == frozenset(
        {"renderD130"}
    )


# -- which list applies, and the pool -------------------------------------------------------


def test_the_pods_list_is_the_pool_and_only_present_gpus_are_in_it(pod: FakePod) -> None:
    inv = host_inventory(settings_of(pod))
    assert [g.index for g in inv.pool] == [2, 5] and inv.restricted
    assert inv.pool_source == str(pod.podinfo)
    assert [g.present for g in inv.gpus] == [i in (2, 5) for i in range(8)]
    # the card nodes the pod lacks are not offered either
    assert all((g.card_node is not None) == g.present for g in inv.gpus)
    as_json: dict[str, Any] = dict(inv.to_json())
    assert as_json["pool"] == {"indices": [2, 5], "source": str(pod.podinfo)}
    assert [g["in_pool"] for g in as_json["gpus"]] == [i in (2, 5) for i in range(8)]


def test_a_list_cannot_widen_the_pool_past_the_nodes_present(pod: FakePod, tmp_path: Path) -> None:
    every = " ".join(f"--device {pod.host.dev_root}/dri/{g.render_name}" for g in pod.host.gpus)
    wide = tmp_path / "wide"
    wide.write_text(every + f" --device {pod.host.dev_root}/dri/renderD199\n")
    inv = host_inventory(settings_of(pod, gpus_from=wide))
    assert [g.index for g in inv.pool] == [2, 5]
    assert any("renderD199: no GPU of this host" in n for n in inv.notes)
    assert any("do not exist under" in n for n in inv.notes)


def test_without_a_list_the_present_gpus_are_the_pool(host: FakeHost) -> None:
    plain = HostSettings(sysfs_root=host.sysfs_root, dev_root=host.dev_root,
                         podinfo_devices=host.root / "no-such-file")  # fmt: skip
    inv = host_inventory(plain)
    assert len(inv.pool) == 8 and not inv.restricted and inv.pool_source is None
    (host.dev_root / "dri" / host.gpus[0].render_name).unlink()
    inv = host_inventory(plain)
    assert [g.index for g in inv.pool] == list(range(1, 8)) and inv.restricted


def test_gpus_from_wins_over_the_pods_list_and_must_exist(pod: FakePod, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.write_text(f"{pod.host.dev_root}/dri/{pod.gpus[1].render_name}\n")
    assert [g.index for g in host_inventory(settings_of(pod, gpus_from=mine)).pool] == [5]
    with pytest.raises(ConfigError, match="cannot read"):
        host_inventory(settings_of(pod, gpus_from=tmp_path / "absent"))
    mine.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="names no device"):
        host_inventory(settings_of(pod, gpus_from=mine))


def test_an_empty_pods_list_applies_no_list(pod: FakePod) -> None:
    """The downward API writes the file even when the pod's annotation is unset."""
    pod.podinfo.write_text("")
    inv = host_inventory(settings_of(pod))
    assert [g.index for g in inv.pool] == [2, 5]  # the nodes present still decide
    assert any("is empty" in n for n in inv.notes)


def test_settings_env_over_file_and_a_distrusted_checkout_cannot_name_a_list(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "rocmenv.toml").write_text('[host]\ngpus-from = "gpus.txt"\npodinfo-devices = ""\n')
    ctx = Context(env={"ROCMENV_SITE_CONFIG": ""}, cwd=root)
    host = settings_for(ctx).host
    assert (host.gpus_from, host.podinfo_devices) == (root / "gpus.txt", None)
    env = {
        "ROCMENV_SITE_CONFIG": "",
        "ROCMENV_GPUS_FROM": "/etc/x",
        "ROCMENV_PODINFO_DEVICES": "/p",
    }
    host = settings_for(Context(env=env, cwd=root)).host
    assert (host.gpus_from, host.podinfo_devices) == (Path("/etc/x"), Path("/p"))
    fork = {"ROCMENV_SITE_CONFIG": "", "ROCMENV_UNTRUSTED": "1"}
    host = settings_for(Context(env=fork, cwd=root)).host
    assert (host.gpus_from, host.podinfo_devices) == (None, PODINFO_DEVICES)


# -- selection and the container's devices --------------------------------------------------


def test_gpus_by_render_node_path_and_only_within_the_pool(pod: FakePod) -> None:
    inv = host_inventory(settings_of(pod))
    dri = pod.host.dev_root / "dri"
    nodes = f"{dri}/{pod.gpus[1].render_name},{dri}/{pod.gpus[0].card_name}"
    assert select(parse_gpus(nodes), inv).indices == (5, 2)
    assert select(parse_gpus("all"), inv).indices == (2, 5)
    outside = pod.host.gpus[0]
    for text in ("0", f"{dri}/{outside.render_name}", outside.uuid):
        with pytest.raises(GpuSelectionError, match="not in this runner's pool"):
            select(parse_gpus(text), inv)
    with pytest.raises(GpuSelectionError, match="no GPU has the node"):
        select(parse_gpus(f"{dri}/renderD199"), inv)


@pytest.mark.parametrize("text", ["/dev/dri/../sda", "/dev/sda", "/dev/dri/renderD", "/x/renderD1"])
def test_a_path_that_is_no_render_or_card_node_is_refused_before_the_host(text: str) -> None:
    with pytest.raises(GpuSelectionError, match="not a render or card node path"):
        parse_gpus(text)


def test_an_empty_pool_is_an_error_not_the_whole_dri(pod: FakePod) -> None:
    for gpu in pod.gpus:
        (pod.host.dev_root / "dri" / gpu.render_name).unlink()
    with pytest.raises(GpuSelectionError, match="no GPU of this host is in the pool"):
        select(parse_gpus("all"), host_inventory(settings_of(pod)))


def _devices(pod: FakePod, tmp_path: Path, **profile: object) -> tuple[set[str], dict[str, str]]:
    facts = HostFacts(env={}, cwd=tmp_path, checkout=None,
                      inventory=host_inventory(settings_of(pod)))  # fmt: skip
    rocm = replace(BUILTIN_PROFILES["rocm"], mounts=(), **profile)  # type: ignore[arg-type]
    spec = build_runspec(rocm, Overrides(), facts, image="IMAGE")
    return {d.host for d in spec.devices}, spec.env_values


def test_all_in_a_pod_passes_the_pools_nodes_never_the_whole_dri(
    pod: FakePod, tmp_path: Path
) -> None:
    dri = pod.host.dev_root / "dri"
    own = {f"{dri}/{n}" for g in pod.gpus for n in (g.render_name, g.card_name)}
    devices, env = _devices(pod, tmp_path)
    assert devices == {f"{pod.host.dev_root}/kfd", *own}
    # env isolation: every node of the pool (not of the host), numbered in the pool
    devices, env = _devices(pod, tmp_path, gpus="5", gpu_isolation="env")
    assert devices == {f"{pod.host.dev_root}/kfd", *own} and env["HIP_VISIBLE_DEVICES"] == "1"
    # CDI names: each GPU of the pool, never amd.com/gpu=all
    devices, _ = _devices(pod, tmp_path, gpu_devices="cdi")
    assert devices == {"amd.com/gpu=2", "amd.com/gpu=5"}
    devices, env = _devices(pod, tmp_path, gpus="5", gpu_devices="cdi", gpu_isolation="env")
    assert devices == {"amd.com/gpu=2", "amd.com/gpu=5"} and env["HIP_VISIBLE_DEVICES"] == "1"


def test_untrusted_mode_in_a_pod_keeps_to_the_pool(pod: FakePod, tmp_path: Path) -> None:
    facts = HostFacts(env={}, cwd=tmp_path, checkout=None,
                      inventory=host_inventory(settings_of(pod)))  # fmt: skip
    fork = replace(BUILTIN_PROFILES["rocm"], mounts=(), name="fork", source="/fork/rocmenv.toml")
    draft = build_runspec(fork, Overrides(), facts, image="IMAGE")
    spec = Guard().apply(draft, fork, facts)
    names = {Path(d.host).name for d in spec.devices}
    assert names == {"kfd", *(n for g in pod.gpus for n in (g.render_name, g.card_name))}


# -- what the commands show -----------------------------------------------------------------


def _cli(pod: FakePod, tmp_path: Path, *args: str) -> tuple[int, str, str]:
    import io

    from rocmenv.cli import main

    out, err = io.StringIO(), io.StringIO()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "ROCMENV_SITE_CONFIG": "",
           **pod.env()}  # fmt: skip
    code = main(list(args), ctx=Context(env=env, cwd=tmp_path, stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def test_rocmenv_gpus_shows_which_gpus_are_the_pods(pod: FakePod, tmp_path: Path) -> None:
    code, out, err = _cli(pod, tmp_path, "gpus")
    assert code == 0, err
    pool = {line.split()[0]: line.split(None, 7)[7] for line in out.splitlines()[1:]}
    assert pool == {str(i): "yes" if i in (2, 5) else "no (no device node)" for i in range(8)}
    assert f"the pool: 2 of 8 GPUs ({pod.podinfo})" in err
    code, out, _ = _cli(pod, tmp_path, "gpus", "--json")
    assert code == 0 and [g["in_pool"] for g in json.loads(out)["gpus"]].count(True) == 2
    pod.podinfo.write_text(f"--device {pod.host.dev_root}/dri/renderD128 --privileged\n")
    code, out, err = _cli(pod, tmp_path, "gpus")
    assert code == 2 and f"{pod.podinfo}:1: '--privileged'" in err and "Traceback" not in err
