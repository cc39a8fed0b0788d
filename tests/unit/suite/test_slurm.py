"""Slurm allocation → gres.conf File= entries → render nodes → rocmenv GPU indices."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocmenv.container.gpu import discover
from rocmenv.errors import SlurmError
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.suite.allocation import allocated_indices, map_allocation, parse_gres_conf
from rocmenv.suite.packer import Job
from rocmenv.suite.slurm import gpu_args, time_limit
from tests.support.fakegpu import build_fake_host


def test_gres_conf_in_file_order_with_ranges_lists_and_other_nodes() -> None:
    text = """
    # comment
    NodeName=other Name=gpu File=/dev/dri/renderD200
    Name=gpu Type=mi300x File=/dev/dri/renderD[130-131]
    NodeName=n[1-2] Name=gpu Type=mi300x File=/dev/dri/renderD128,/dev/dri/renderD135
    Name=mps Count=100
    """
    devices = parse_gres_conf(text, node="n2")
    assert [(d.index, d.path) for d in devices] == [
        (0, "/dev/dri/renderD130"),
        (1, "/dev/dri/renderD131"),
        (2, "/dev/dri/renderD128"),
        (3, "/dev/dri/renderD135"),
    ]
    assert devices[0].type == "mi300x"


def test_step_gpus_win_over_job_gpus_and_none_is_an_error() -> None:
    assert allocated_indices({"SLURM_STEP_GPUS": "2,5", "SLURM_JOB_GPUS": "0,1"}) == (2, 5)
    assert allocated_indices({"SLURM_JOB_GPUS": "3"}) == (3,)
    with pytest.raises(SlurmError, match="allocated no GPUs"):
        allocated_indices({"ROCR_VISIBLE_DEVICES": "0"})


def test_indices_map_through_gres_order_not_pci_order_nor_minor(tmp_path: Path) -> None:
    host = build_fake_host(tmp_path / "host")
    inventory = discover(host.sysfs_root, host.dev_root)
    # gres.conf lists the GPUs in reverse PCI order
    files = [str(g.render_node) for g in reversed(inventory.gpus)]
    text = "".join(f"Name=gpu Type=mi300x File={f}\n" for f in files)
    node = map_allocation((0, 3), parse_gres_conf(text), inventory)
    assert node.host == (7, 4)
    assert node.paths == (files[0], files[3])
    # the File= entry is matched by device number, even under another name
    if os.geteuid() == 0:
        alias = tmp_path / "alias-gpu"
        os.mknod(alias, 0o20660, os.stat(inventory.gpus[2].render_node).st_rdev)
        node = map_allocation((0,), parse_gres_conf(f"Name=gpu File={alias}\n"), inventory)
        assert node.host == (2,)
    with pytest.raises(SlurmError, match="lists 8 GPU files"):
        map_allocation((8,), parse_gres_conf(text), inventory)
    with pytest.raises(SlurmError, match="none of this host's GPUs"):
        map_allocation((0,), parse_gres_conf("Name=gpu File=/dev/nothing9\n"), inventory)


def test_request_arguments_and_time_limit() -> None:
    assert gpu_args(SlurmSettings(gres_type="mi300x"), 4) == ["--gres=gpu:mi300x:4"]
    assert gpu_args(SlurmSettings(), 2) == ["--gres=gpu:2"]
    assert gpu_args(SlurmSettings(gpu_request="gpus"), 2) == ["--gpus=2"]
    assert gpu_args(SlurmSettings(), 0) == []
    s = SlurmSettings(time_factor=1.5, min_time=300)
    assert time_limit(s, 1600) == "40"
    assert time_limit(s, 10) == "5"
    assert Job(name="x", gpus=1, estimate=1).gpus == 1


def test_gpu_count_of_a_selection_and_the_sbatch_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from rocmenv.cli.run import node_run_args
    from rocmenv.context import Context
    from rocmenv.errors import GpuSelectionError
    from rocmenv.settings.resolve import settings_for
    from rocmenv.suite.slurm import gpu_count, render_sbatch

    (tmp_path / ".git").mkdir()
    (tmp_path / "rocmenv.toml").write_text(
        '[slurm]\npartition = "mi300x"\naccount = "ml"\ngres-type = "mi300x"\n'
        'extra-args = ["--qos=ci"]\n'
    )
    ctx = Context(cwd=tmp_path, env={"PATH": "/nonexistent"})
    assert gpu_count(ctx, "0-3") == 4
    assert gpu_count(ctx, "1,5,GPU-0123456789abcdef") == 3
    assert gpu_count(ctx, "none") == 0
    with pytest.raises(GpuSelectionError):
        gpu_count(ctx, "slurm")
    args = argparse.Namespace(
        profile=None, image=None, workdir=None, env=["A=1"], volume=[], untrusted=True,
        gpus="0,1",
    )  # fmt: skip
    node = node_run_args(args)
    assert node == ["run", "--gpus", "slurm", "--env", "A=1", "--untrusted"]
    settings = settings_for(ctx).slurm
    script = render_sbatch(
        ctx, settings, count=2, profile="ci", node_args=[*node, "--profile", "ci", "--"]
    )
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert [x for x in lines if x.startswith("#SBATCH")] == [
        "#SBATCH --job-name=rocmenv-ci", "#SBATCH --nodes=1", "#SBATCH --ntasks=1",
        "#SBATCH --gres=gpu:mi300x:2", "#SBATCH --partition=mi300x", "#SBATCH --account=ml",
        "#SBATCH --qos=ci",
    ]  # fmt: skip
    assert lines[-1] == ('exec rocmenv run --gpus slurm --env A=1 --untrusted --profile ci -- "$@"')


# -- the submitting side's GPU and argv mapping (issue 21) -----------------------------------


def test_the_virtual_pool_fits_every_test_at_once() -> None:
    from rocmenv.suite.slurm import slurm_pool

    jobs = [Job(name="a", gpus=0, estimate=1), Job(name="b", gpus=2, estimate=1),
            Job(name="c", gpus=4, estimate=1)]  # fmt: skip
    assert slurm_pool(jobs) == tuple(range(7))  # a CPU-only test holds a slot too
    assert slurm_pool([]) == ()


def test_a_typed_gpus_request_and_the_time_limit_in_whole_minutes() -> None:
    assert gpu_args(SlurmSettings(gpu_request="gpus", gres_type="mi300x"), 8) == ["--gpus=mi300x:8"]
    assert time_limit(SlurmSettings(time_factor=1.0, min_time=0), 61) == "2"  # rounded up
    assert time_limit(SlurmSettings(time_factor=1.0, min_time=0), 60) == "1"
    assert time_limit(SlurmSettings(time_factor=1.0, min_time=0), 0) == "1"  # never 0 (none)
    assert time_limit(SlurmSettings(time_factor=3.0, min_time=0), 100) == "5"


def test_job_arguments_in_order() -> None:
    from rocmenv.suite.slurm import job_args

    full = SlurmSettings(partition="p", account="a", gres_type="mi300x", extra_args=("--qos=ci",),
                         time_factor=1.0, min_time=0)  # fmt: skip
    assert job_args(full, 2, time_seconds=90) == [
        "--nodes=1", "--ntasks=1", "--gres=gpu:mi300x:2", "--time=2", "--partition=p",
        "--account=a", "--qos=ci",
    ]  # fmt: skip
    assert job_args(SlurmSettings(), 0, time_seconds=None) == ["--nodes=1", "--ntasks=1"]


def test_the_node_command_is_this_rocmenv_with_this_config(tmp_path: Path) -> None:
    import sys

    from rocmenv.context import Context
    from rocmenv.suite.slurm import _node_command

    assert _node_command(Context(env={}, cwd=tmp_path), ["run", "x"]) == [
        sys.executable, "-I", "-m", "rocmenv", "run", "x"
    ]  # fmt: skip
    ctx = Context(env={}, cwd=tmp_path, config_path=tmp_path / "sub" / ".." / "rocmenv.toml")
    assert _node_command(ctx, ["run"]) == [
        sys.executable, "-I", "-m", "rocmenv", "--config", str(tmp_path / "rocmenv.toml"), "run"
    ]  # fmt: skip


def test_each_test_is_an_srun_of_slurm_exec_with_its_flags(tmp_path: Path) -> None:
    import sys

    from rocmenv.context import Context
    from rocmenv.settings.resolve import Flags
    from rocmenv.suite.slurm import SlurmBackend

    settings = SlurmSettings(gres_conf=Path("/etc/x/gres.conf"), time_factor=1.0, min_time=0)
    backend = SlurmBackend(
        ctx=Context(env={}, cwd=tmp_path), profile="ci", flags=Flags(engine="podman", untrusted=True),
        commands={"t.py": ("python", "t.py")}, log_dir=tmp_path, settings=settings,
    )  # fmt: skip
    assert backend.argv(Job(name="t.py", gpus=2, estimate=120), "job-1") == [
        "srun", "--job-name=job-1", "--quiet", "--nodes=1", "--ntasks=1", "--gres=gpu:2",
        "--time=2", sys.executable, "-I", "-m", "rocmenv", "suite", "slurm-exec", "--profile", "ci",
        "--engine", "podman", "--untrusted", "--gres-conf", "/etc/x/gres.conf", "--",
        "python", "t.py",
    ]  # fmt: skip
    plain = SlurmBackend(
        ctx=Context(env={}, cwd=tmp_path), profile=None, flags=Flags(), commands={"t": ("t",)},
        log_dir=tmp_path, settings=SlurmSettings(),
    )  # fmt: skip
    argv = plain.argv(Job(name="t", gpus=0, estimate=1), "j")
    assert argv[argv.index("slurm-exec") + 1 :] == ["--no-gpus", "--", "t"]  # takes none


def test_the_node_s_marker_lines_give_the_gpus_and_the_runtime(tmp_path: Path) -> None:
    from rocmenv.suite.allocation import MARKER
    from rocmenv.suite.slurm import _markers

    log = tmp_path / "t.log"
    log.write_text(
        f"{MARKER} slurm=0,1 host=3,5 files=/dev/dri/renderD131 node=n1\n"
        "test output host=9 runtime=1\n"
        f"{MARKER} runtime=12.250 exit=0\n"
    )
    assert _markers(log) == ((3, 5), 12.25)
    log.write_text(f"{MARKER} slurm= host=none files= node=n1\n{MARKER} runtime=x exit=1\n")
    assert _markers(log) == (None, None)
    log.write_text(f"{MARKER} host=3,x\n")
    assert _markers(log) == (None, None)
    assert _markers(tmp_path / "missing.log") == (None, None)


def _sinfo(tmp_path: Path, output: str) -> dict[str, str]:
    """A PATH whose ``sinfo`` prints ``output``: GRES shapes this one-node test bed cannot
    show (several nodes, typed GRES with socket bindings)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "sinfo").write_text(f"#!/bin/sh\nprintf '%s' '{output}'\n")
    (bin_dir / "sinfo").chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


@pytest.mark.parametrize(
    ("output", "capacity"),
    [("gpu:mi300x:8(S:0-1)\ngpu:4\n(null)\n", 8), ("gpu:2,mps:100\ngpu:mi250:4\n", 4),
     ("(null)\n", None), ("", None)],
)  # fmt: skip
def test_node_capacity_is_the_most_gpus_a_node_offers(
    tmp_path: Path, output: str, capacity: int | None
) -> None:
    from rocmenv.suite.slurm import node_gpu_capacity

    assert node_gpu_capacity(_sinfo(tmp_path, output)) == capacity


def test_a_capacity_already_known_is_checked_without_asking_sinfo(tmp_path: Path) -> None:
    from rocmenv.context import Context
    from rocmenv.errors import UsageError
    from rocmenv.settings.resolve import Flags
    from rocmenv.suite.slurm import SlurmBackend

    env = _sinfo(tmp_path, "gpu:16\n")  # sinfo would allow the 8-GPU test
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    backend = SlurmBackend(
        ctx=Context(env=env, cwd=tmp_path), profile=None, flags=Flags(), commands={},
        log_dir=tmp_path, settings=SlurmSettings(),
    )  # fmt: skip
    jobs = [Job(name="big", gpus=8, estimate=1)]
    backend.check(jobs)
    with pytest.raises(UsageError, match=r"than any Slurm node has \(4\): big \(8\)"):
        backend.check(jobs, capacity=4)


def test_node_capacity_without_sinfo_is_unknown(tmp_path: Path) -> None:
    from rocmenv.suite.slurm import node_gpu_capacity

    assert node_gpu_capacity({"PATH": str(tmp_path)}) is None


@pytest.mark.requires("slurm")
def test_node_capacity_of_the_test_bed_is_its_eight_gpus() -> None:
    from rocmenv.suite.slurm import node_gpu_capacity

    assert node_gpu_capacity(dict(os.environ)) == 8


def test_all_gpus_with_slurm_is_a_whole_node(tmp_path: Path) -> None:
    from rocmenv.context import Context
    from rocmenv.errors import UsageError
    from rocmenv.suite.slurm import gpu_count

    assert gpu_count(Context(cwd=tmp_path, env=_sinfo(tmp_path, "gpu:mi300x:8\n")), "all") == 8
    with pytest.raises(UsageError) as info:
        gpu_count(Context(cwd=tmp_path, env={"PATH": str(tmp_path)}), "all")
    assert info.value.what == (
        "--gpus all with Slurm means a whole node, but sinfo reports no GPU nodes"
    )
    assert info.value.hint == "name a count instead, e.g. --gpus 0-3 for 4 GPUs"


def test_the_batch_script_in_full_with_this_config(tmp_path: Path) -> None:
    from rocmenv.context import Context
    from rocmenv.suite.slurm import render_sbatch

    work = tmp_path / "my repo"
    ctx = Context(env={}, cwd=work, config_path=tmp_path / "sub" / ".." / "ci.toml")
    script = render_sbatch(ctx, SlurmSettings(), count=1, profile="ci", node_args=["run", "--"])
    assert script == (
        "#!/bin/bash\n"
        "# rocmenv: profile ci with 1 GPU(s); submit with: sbatch THIS_FILE CMD…\n"
        "# The job's container gets exactly the GPUs Slurm allocates (rocmenv run --gpus slurm).\n"
        "#SBATCH --job-name=rocmenv-ci\n#SBATCH --nodes=1\n#SBATCH --ntasks=1\n"
        "#SBATCH --gres=gpu:1\n"
        "set -euo pipefail\n"
        f"cd '{work}'\n"
        f'exec rocmenv --config {tmp_path}/ci.toml run -- "$@"\n'
    )


def test_control_characters_in_the_script_or_job_arguments_are_refused_naming_where(
    tmp_path: Path,
) -> None:
    from rocmenv.context import Context
    from rocmenv.errors import UsageError
    from rocmenv.suite.slurm import job_args, render_sbatch

    ctx = Context(env={}, cwd=tmp_path / "a\nb")
    with pytest.raises(UsageError, match="options --format sbatch"):
        render_sbatch(ctx, SlurmSettings(), count=1, profile="ci", node_args=["run"])
    with pytest.raises(UsageError, match="the Slurm job's arguments"):
        job_args(SlurmSettings(extra_args=("--comment=a\rb",)), 1, time_seconds=None)


def test_marker_lines_are_read_from_any_bytes_and_values_keep_their_equals_signs(
    tmp_path: Path,
) -> None:
    from rocmenv.suite.allocation import MARKER
    from rocmenv.suite.slurm import _markers

    log = tmp_path / "t.log"
    log.write_bytes(
        b"\xff\xfe not utf-8 \xc3\n"
        + f"{MARKER} slurm=0 host=none files=/dev/x node=n=1 extra\n".encode()
        + f"{MARKER} runtime=2.5 exit=0\n".encode()
    )
    assert _markers(log) == (None, 2.5)
    log.write_text(f"{MARKER} slurm=1 host=NONE\n")
    assert _markers(log) == (None, None)  # not a list of indices: ignored
