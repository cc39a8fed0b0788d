"""CDI: the spec ``rocmenv cdi generate`` writes from the KFD topology (one device per GPU by
rocmenv's index, ``all``, ``/dev/kfd`` for each), and a profile's ``gpu-devices = "cdi"``:
``run``/``options`` name exactly the selected GPUs ``amd.com/gpu=N``, in untrusted mode
too (the guard allows the selected GPUs' CDI names and nothing else)."""

from __future__ import annotations

import io
import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rocmenv.cli import main
from rocmenv.container.cdi import cdi_support, generate_spec
from rocmenv.container.gpu import discover
from rocmenv.container.render import create_body
from rocmenv.container.runspec import Device, RunSpec
from rocmenv.context import Context
from tests.support.fakegpu import FakeHost, build_fake_host

PROJECT = """
[profiles.cdi]
extends = "rocm"
image = "docker.io/rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"
gpu-devices = "cdi"
mounts = []
[profiles.cdi-env]
extends = "cdi"
gpu-isolation = "env"
[profiles.cdi-extra]
extends = "cdi"
devices = ["amd.com/gpu=all"]
"""


@pytest.fixture
def fake(tmp_path: Path) -> FakeHost:
    return build_fake_host(tmp_path / "host", char_devices=False)


def run(fake: FakeHost, tmp_path: Path, *argv: str, **env: str) -> tuple[int, str, str]:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True, exist_ok=True)
    (repo / "rocmenv.toml").write_text(PROJECT)
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(
        env={"HOME": str(tmp_path), **fake.env(), **env}, cwd=repo, stdout=out, stderr=err
    )
    return main(list(argv), ctx=ctx), out.getvalue(), err.getvalue()


def devices_of(args: str) -> list[str]:
    return [a.removeprefix("--device=") for a in shlex.split(args) if a.startswith("--device=")]


def test_the_spec_has_one_device_per_gpu_in_pci_order_all_and_kfd(fake: FakeHost) -> None:
    spec = generate_spec(discover(fake.sysfs_root, fake.dev_root))
    assert spec["kind"] == "amd.com/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert names == [*map(str, range(8)), "all"]
    for gpu in fake.gpus:  # rocmenv's index = PCI order, not KFD node or minor order
        nodes = spec["devices"][gpu.index]["containerEdits"]["deviceNodes"]
        assert nodes == [
            {
                "path": f"/dev/dri/{gpu.render_name}",
                "hostPath": str(fake.dev_root / "dri" / gpu.render_name),
            },
            {
                "path": f"/dev/dri/{gpu.card_name}",
                "hostPath": str(fake.dev_root / "dri" / gpu.card_name),
            },
        ]
    every = spec["devices"][-1]["containerEdits"]["deviceNodes"]
    assert len(every) == 16
    assert spec["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/kfd", "hostPath": str(fake.dev_root / "kfd")}
    ]
    assert spec["cdiVersion"] == "0.5.0"  # hostPath needs 0.5.0


def test_on_a_real_dev_root_the_spec_needs_only_cdi_0_3(fake: FakeHost) -> None:
    inv = discover(fake.sysfs_root, fake.dev_root)
    real = replace(inv, kfd_node=Path("/dev/kfd"), gpus=tuple(
        replace(g, render_node=Path("/dev/dri") / g.render_node.name,
                card_node=Path("/dev/dri") / g.card_node.name if g.card_node else None)
        for g in inv.gpus
    ))  # fmt: skip
    spec = generate_spec(real)
    assert spec["cdiVersion"] == "0.3.0"
    assert all(
        "hostPath" not in n for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]
    )


def test_cdi_generate_writes_the_spec_atomically(fake: FakeHost, tmp_path: Path) -> None:
    out = tmp_path / "cdi" / "amd.json"
    code, _, err = run(fake, tmp_path, "cdi", "generate", "--output", str(out))
    assert code == 0, err
    assert json.loads(out.read_text()) == generate_spec(discover(fake.sysfs_root, fake.dev_root))
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    empty = build_fake_host(tmp_path / "empty", gpus=0, char_devices=False)
    code, _, err = run(empty, tmp_path, "cdi", "generate")
    assert code == 1 and "no AMD GPUs" in err


@pytest.mark.parametrize("untrusted", [False, True])
def test_a_cdi_profile_names_exactly_the_selected_gpus(
    fake: FakeHost, tmp_path: Path, untrusted: bool
) -> None:
    flags = ["--untrusted"] if untrusted else []
    code, out, err = run(fake, tmp_path, "options", "--format", "docker", "--profile", "cdi",
                         "--gpus", "5,2", *flags)  # fmt: skip
    assert code == 0, err
    assert devices_of(out) == ["amd.com/gpu=2", "amd.com/gpu=5"]  # no node paths, no /dev/kfd
    assert "--env=HIP_VISIBLE_DEVICES=0,1" in shlex.split(out)


def test_all_is_the_all_device_and_untrusted_on_this_host_each_gpu(
    fake: FakeHost, tmp_path: Path
) -> None:
    code, out, _ = run(
        fake, tmp_path, "options", "--format", "docker", "--profile", "cdi", "--gpus", "all"
    )
    assert code == 0 and devices_of(out) == ["amd.com/gpu=all"]
    code, out, _ = run(fake, tmp_path, "options", "--format", "docker", "--profile", "cdi", "--gpus",
                       "all", "--untrusted")  # fmt: skip
    assert code == 0 and devices_of(out) == [f"amd.com/gpu={i}" for i in range(8)]


def test_env_isolation_passes_all_gpus_and_the_host_indices(fake: FakeHost, tmp_path: Path) -> None:
    code, out, _ = run(
        fake, tmp_path, "options", "--format", "docker", "--profile", "cdi-env", "--gpus", "3,4"
    )
    assert code == 0 and devices_of(out) == ["amd.com/gpu=all"]
    assert "--env=HIP_VISIBLE_DEVICES=3,4" in shlex.split(out)


def test_untrusted_refuses_a_cdi_name_the_selection_did_not_make(
    fake: FakeHost, tmp_path: Path
) -> None:
    """The guard's allowed devices are the selected GPUs' names: a profile's own
    ``amd.com/gpu=all`` would reach every GPU."""
    trusted = run(
        fake, tmp_path, "options", "--format", "docker", "--profile", "cdi-extra", "--gpus", "1"
    )
    assert trusted[0] == 0 and "amd.com/gpu=all" in devices_of(trusted[1])
    code, _, err = run(fake, tmp_path, "options", "--format", "docker", "--profile", "cdi-extra",
                       "--gpus", "1", "--untrusted")  # fmt: skip
    assert code == 2
    assert "devices = 'amd.com/gpu=all'" in err


def test_compose_and_the_engine_api_name_cdi_devices_as_docker_does(
    fake: FakeHost, tmp_path: Path
) -> None:
    code, out, _ = run(
        fake, tmp_path, "options", "--format", "compose", "--profile", "cdi", "--gpus", "0"
    )
    assert code == 0
    service = next(iter(yaml.safe_load(out)["services"].values()))
    assert service["devices"] == ["amd.com/gpu=0"]
    spec = RunSpec(image="i", command=(), profile="p",
                   devices=(Device(host="amd.com/gpu=0", container="amd.com/gpu=0", gpu=True, cdi=True),))  # fmt: skip
    host = create_body(spec, tty=False, stdin_open=False)["HostConfig"]
    assert host["Devices"] == []
    assert host["DeviceRequests"] == [{"Driver": "cdi", "DeviceIDs": ["amd.com/gpu=0"]}]


@pytest.mark.parametrize(
    ("engine", "version", "supported"),
    [("podman", "4.3.1", True), ("podman", "4.0.2", False), ("podman", "5.2.0", True),
     ("docker-api", "20.10.24+dfsg1", False), ("docker-cli", "25.0.3", True),
     ("docker-api", "27.1.1", True), ("docker-api", "junk", False)],
)  # fmt: skip
def test_which_engines_take_cdi_names(engine: str, version: str, supported: bool) -> None:
    ok, why = cdi_support(engine, version)
    assert ok is supported
    assert version in why


def test_a_typo_in_gpu_devices_is_an_error(fake: FakeHost, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "rocmenv.toml").write_text('[profiles.x]\ngpu-devices = "cdl"\n')
    err = io.StringIO()
    code = main(["options", "--profile", "x"], ctx=Context(env={"HOME": str(tmp_path)}, cwd=repo,
                                                    stdout=io.StringIO(), stderr=err))  # fmt: skip
    assert code == 2 and "did you mean 'cdi'" in err.getvalue()
