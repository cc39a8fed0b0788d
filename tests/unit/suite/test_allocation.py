"""The node side of a Slurm job (issue 21): where gres.conf is, which GPUs Slurm's indices
name on a fake 8-GPU host (real device nodes when root), what each refusal says, and the
marker line. The container run (exec_on_node) is the Slurm integration tests'."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from rocmenv.context import Context
from rocmenv.errors import ConfigError, SlurmError
from rocmenv.settings.resolve import Flags, settings_for
from rocmenv.suite.allocation import (
    DEFAULT_GRES_CONF,
    NodeGpus,
    _expand,
    allocated_gpus,
    allocated_indices,
    check_access,
    default_gres_conf,
    describe,
    map_allocation,
    parse_gres_conf,
    warm_up_node,
)
from tests.support.fakegpu import build_fake_host


def test_ranges_lists_and_zero_padding_expand_in_order() -> None:
    assert _expand("/dev/dri/renderD[128-130,140]") == [
        "/dev/dri/renderD128", "/dev/dri/renderD129", "/dev/dri/renderD130", "/dev/dri/renderD140"
    ]  # fmt: skip
    assert _expand("n[08-10]x,m1") == ["n08x", "n09x", "n10x", "m1"]
    assert _expand("a,,b") == ["a", "b"]
    assert _expand("/dev/x[5]") == ["/dev/x5"]


def test_gres_lines_need_name_gpu_and_a_file_and_keys_are_any_case() -> None:
    text = "NAME=gpu FILE=/dev/a # trailing\nName=gpu Count=2\nName=mps File=/dev/m\nName=gpu File=/dev/b Type\n"
    assert [(d.index, d.path, d.type) for d in parse_gres_conf(text)] == [
        (0, "/dev/a", None), (1, "/dev/b", None)
    ]  # fmt: skip


def test_gres_lines_for_other_nodes_are_skipped_only_when_a_node_is_named() -> None:
    text = "NodeName=a[1-2] Name=gpu File=/dev/a\nNodeName=b Name=gpu File=/dev/b\n"
    assert [d.path for d in parse_gres_conf(text, node="a2")] == ["/dev/a"]
    assert [d.path for d in parse_gres_conf(text)] == ["/dev/a", "/dev/b"]


def test_gres_conf_is_next_to_slurm_conf_or_where_scontrol_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_gres_conf({"SLURM_CONF": "/opt/s/slurm.conf"}) == Path("/opt/s/gres.conf")
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol: the default
    assert default_gres_conf({"SLURM_CONF": ""}) == DEFAULT_GRES_CONF
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho 'SLURM_CONF              = /srv/slurm/slurm.conf'\n")
    fake.chmod(0o755)
    assert default_gres_conf({}) == Path("/srv/slurm/gres.conf")
    fake.write_text("#!/bin/sh\necho 'SlurmctldPort = 6817'\n")
    assert default_gres_conf({}) == DEFAULT_GRES_CONF
    # asked for its config, on any line of it, even when it exits non-zero
    fake.write_text(
        '#!/bin/sh\n[ "$*" = "show config" ] || exit 0\n'
        "echo 'Configuration data'\necho 'SLURM_CONF = /srv/s2/slurm.conf'\nexit 1\n"
    )
    assert default_gres_conf({}) == Path("/srv/s2/gres.conf")


def test_indices_that_are_not_numbers_are_an_error_naming_the_variable() -> None:
    with pytest.raises(SlurmError) as err:
        allocated_indices({"SLURM_STEP_GPUS": "0,x"})
    assert err.value.what == "SLURM_STEP_GPUS='0,x' is not a list of GPU indices"
    assert allocated_indices({"SLURM_STEP_GPUS": "  ", "SLURM_JOB_GPUS": " 1,2 "}) == (1, 2)
    with pytest.raises(SlurmError) as none:
        allocated_indices({})
    assert none.value.what == (
        "Slurm allocated no GPUs to this job (neither SLURM_STEP_GPUS nor SLURM_JOB_GPUS is set)"
    )
    assert none.value.hint is not None and "--gres=gpu:K" in none.value.hint


def test_a_file_entry_is_matched_by_name_when_it_is_no_device(tmp_path: Path) -> None:
    from rocmenv.container.gpu import discover

    host = build_fake_host(tmp_path / "host")
    inventory = discover(host.sysfs_root, host.dev_root)
    plain = tmp_path / "x" / inventory.gpus[5].render_node.name  # a regular file: no rdev
    plain.parent.mkdir()
    plain.write_text("")
    devices = parse_gres_conf(f"Name=gpu File={plain}\nName=gpu File=/nowhere/renderD999\n")
    node = map_allocation((0,), devices, inventory)
    assert node == NodeGpus(slurm=(0,), paths=(str(plain),), host=(5,))
    with pytest.raises(SlurmError) as err:
        map_allocation((1,), devices, inventory)
    assert (
        err.value.what
        == "gres.conf File=/nowhere/renderD999 (Slurm GPU 1) is none of this host's GPUs"
    )
    with pytest.raises(SlurmError) as neg:
        map_allocation((-1,), devices, inventory)
    assert neg.value.what == "Slurm allocated GPU index -1 but gres.conf lists 2 GPU files"
    assert neg.value.hint == "gres.conf on this node must match the one slurmd read"
    assert map_allocation((), devices, inventory) == NodeGpus(slurm=(), paths=(), host=())


def test_opening_the_allocated_nodes_refuses_only_what_the_cgroup_forbids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = build_fake_host(tmp_path / "host")
    nodes = [str(host.dev_root / "dri" / "renderD128"), str(tmp_path / "missing")]
    check_access(nodes)  # no driver behind the node (ENXIO), or none at all: not our business
    # root passes every device cgroup here: EPERM stands in for a node outside the job's
    real_open = os.open

    def cgroup_open(path: str, flags: int) -> int:
        if path.endswith("renderD129"):
            raise PermissionError(errno.EPERM, "Operation not permitted", path)
        return real_open(path, flags)

    monkeypatch.setattr(os, "open", cgroup_open)
    check_access(nodes)
    with pytest.raises(SlurmError) as err:
        check_access([*nodes, str(host.dev_root / "dri" / "renderD129")])
    assert err.value.what == (
        f"{host.dev_root}/dri/renderD129 was mapped from this job's allocation but the job may "
        "not open it"
    )
    assert err.value.hint == "gres.conf's File= order differs from the one slurmd uses"


def test_the_jobs_gpus_come_from_its_indices_through_gres_conf(tmp_path: Path) -> None:
    host = build_fake_host(tmp_path / "host")
    renders = sorted((host.dev_root / "dri").glob("renderD*"), reverse=True)
    conf = tmp_path / "gres.conf"
    conf.write_text(
        "NodeName=some-other-node Name=gpu File=/dev/dri/renderD999\n"
        + "".join(f"Name=gpu File={p}\n" for p in renders)
    )
    env = {"ROCMENV_SYSFS_ROOT": str(host.sysfs_root), "ROCMENV_DEV_ROOT": str(host.dev_root),
           "ROCMENV_SITE_CONFIG": "", "SLURM_JOB_GPUS": "0,2"}  # fmt: skip
    ctx = Context(env=env, cwd=tmp_path)
    node = allocated_gpus(ctx, settings_for(ctx, Flags()), conf)
    assert node.slurm == (0, 2) and node.paths == (str(renders[0]), str(renders[2]))
    assert len(node.host) == 2 and node.host[0] != node.host[1]
    with pytest.raises(ConfigError) as err:
        allocated_gpus(ctx, settings_for(ctx, Flags()), tmp_path / "none.conf")
    assert err.value.what == f"cannot read {tmp_path}/none.conf: No such file or directory"
    assert err.value.hint == "set gres-conf in [slurm]"


def test_the_marker_line_names_slurms_and_rocmenvs_gpus_the_files_and_the_node() -> None:
    node = NodeGpus(slurm=(0, 3), paths=("/dev/dri/renderD128", "/dev/dri/renderD131"), host=(4, 7))
    assert describe(node, {"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "3"}) == (
        "slurm=0,3 host=4,7 files=/dev/dri/renderD128,/dev/dri/renderD131 "
        f"node={socket.gethostname()} step=41.3"
    )
    assert describe(NodeGpus(slurm=(), paths=(), host=())) == (
        f"slurm=none host=none files=none node={socket.gethostname()} step=?"
    )


def test_a_comment_ends_the_line_at_its_first_hash_and_a_value_keeps_its_equals_signs() -> None:
    text = "Name=gpu File=/dev/a=1 # File=/dev/b # Type=x\n"
    assert [(d.path, d.type) for d in parse_gres_conf(text)] == [("/dev/a=1", None)]


def test_a_hanging_scontrol_is_given_up_after_ten_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for subprocess.run: a real hanging scontrol would cost the test the full
    ten seconds (the deadline is what is pinned, and that it ends in the default path)."""
    import subprocess

    asked: list[object] = []

    def hangs(argv: list[str], **kw: object) -> object:
        asked.append(kw.get("timeout"))
        raise subprocess.TimeoutExpired(argv, 10)

    monkeypatch.setattr(subprocess, "run", hangs)
    assert default_gres_conf({}) == DEFAULT_GRES_CONF
    assert asked == [10]


def test_without_gpus_allocated_the_hint_says_how_to_ask_for_them() -> None:
    with pytest.raises(SlurmError) as none:
        allocated_indices({"SLURM_JOB_GPUS": ""})
    assert none.value.hint == (
        "run through `rocmenv suite run --backend slurm`, which asks for --gres=gpu:K"
    )


def test_a_host_without_gpus_or_with_a_missing_node_matches_by_name_or_refuses(
    tmp_path: Path,
) -> None:
    from rocmenv.container.gpu import discover

    devices = parse_gres_conf("Name=gpu File=/dev/dri/renderD128\n")
    with pytest.raises(SlurmError) as err:
        map_allocation((0,), devices, None)  # nothing discovered
    assert err.value.what == (
        "gres.conf File=/dev/dri/renderD128 (Slurm GPU 0) is none of this host's GPUs"
    )
    assert err.value.hint == (
        "see `rocmenv gpus`; gres.conf should list render nodes (/dev/dri/renderD*)"
    )
    host = build_fake_host(tmp_path / "host")
    inventory = discover(host.sysfs_root, host.dev_root)
    gone = inventory.gpus[2].render_node
    gone.unlink()  # the inventory names a node that is not there (any more)
    node = map_allocation((0,), parse_gres_conf(f"Name=gpu File=/x/{gone.name}\n"), inventory)
    assert node.host == (2,)


def test_a_node_that_opens_is_closed_again_and_a_fifo_does_not_block(tmp_path: Path) -> None:
    import threading

    plain = tmp_path / "plain"
    plain.write_text("")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    before = len(os.listdir("/proc/self/fd"))
    check_access([str(plain)])
    assert len(os.listdir("/proc/self/fd")) == before
    done = threading.Event()

    def check() -> None:
        check_access([str(fifo)])
        done.set()

    threading.Thread(target=check, daemon=True).start()
    finished = done.wait(10)
    if not finished:  # let the blocked open return before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert finished, "opening an allocated node blocked"


def test_gres_conf_is_found_next_to_slurm_conf_when_nothing_names_it(tmp_path: Path) -> None:
    host = build_fake_host(tmp_path / "host")
    (tmp_path / "gres.conf").write_text(f"Name=gpu File={host.dev_root}/dri/renderD129\n")
    env = {"ROCMENV_SYSFS_ROOT": str(host.sysfs_root), "ROCMENV_DEV_ROOT": str(host.dev_root),
           "ROCMENV_SITE_CONFIG": "", "SLURM_JOB_GPUS": "0",
           "SLURM_CONF": str(tmp_path / "slurm.conf")}  # fmt: skip
    ctx = Context(env=env, cwd=tmp_path)
    node = allocated_gpus(ctx, settings_for(ctx, Flags()))
    assert node.paths == (f"{host.dev_root}/dri/renderD129",)


def test_gres_lines_name_this_node_by_its_short_hostname(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine's hostname cannot be changed for a test: gethostname is stood in for."""
    host = build_fake_host(tmp_path / "host")
    conf = tmp_path / "gres.conf"
    conf.write_text(f"NodeName=gpu-7 Name=gpu File={host.dev_root}/dri/renderD130\n")
    env = {"ROCMENV_SYSFS_ROOT": str(host.sysfs_root), "ROCMENV_DEV_ROOT": str(host.dev_root),
           "ROCMENV_SITE_CONFIG": "", "SLURM_JOB_GPUS": "0"}  # fmt: skip
    ctx = Context(env=env, cwd=tmp_path)
    monkeypatch.setattr(socket, "gethostname", lambda: "gpu-7.cluster.example")
    node = allocated_gpus(ctx, settings_for(ctx, Flags()), conf)
    assert node.paths == (f"{host.dev_root}/dri/renderD130",)


@pytest.mark.parametrize(
    "config",
    [None, 'default-profile = "x"\n[profiles.x]\nimage = "rocm/sgl-dev:v1"\n', "not toml ["],
)
def test_the_runners_warm_up_asks_no_engine_and_never_fails(
    tmp_path: Path, config: str | None
) -> None:
    if config is not None:
        (tmp_path / "rocmenv.toml").write_text(config)
    env = {"HOME": str(tmp_path), "DOCKER_HOST": "unix:///nonexistent.sock", "PATH": ""}
    warm_up_node(Context(env=env, cwd=tmp_path))  # no engine, no registry: no error either
    warm_up_node(Context(env=env, cwd=tmp_path), untrusted=True)
