"""Slurm allocation → gres.conf File= entries → render nodes → rocmenv GPU indices."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocmenv.errors import SlurmError
from rocmenv.settings.slurm import SlurmSettings
from rocmenv.spec.gpu import discover
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
