"""The one-allocation Slurm packing: how many GPUs and tasks to hold, for how long, and the
step's arguments (``tests/integration/suite/test_slurm.py`` runs it on the test bed)."""

from __future__ import annotations

import pytest

from rocmenv.errors import ConfigError
from rocmenv.settings.slurm import SlurmSettings, parse_slurm
from rocmenv.suite.packer import Job
from rocmenv.suite.policy import RunPolicy
from rocmenv.suite.steps import (
    NodeGres,
    allocation_seconds,
    allocation_size,
    allocation_tasks,
    parse_nodes,
    salloc_argv,
    step_args,
)

SETTINGS = SlurmSettings(gres_type="mi300x", min_time=60, time_factor=2.0, partition="gpu")


def _jobs(*gpus: int) -> list[Job]:
    return [Job(name=f"t{i}", gpus=g, estimate=100.0) for i, g in enumerate(gpus)]


def test_sinfo_nodes_count_free_gpus_of_the_type_on_usable_nodes_only() -> None:
    text = (
        "vm|gpu:mi300x:8|gpu:mi300x:3(IDX:0-2)|mix|\n"
        "idle1|gpu:mi300x:4,gpu:mi250:2|gpu:mi300x:0(IDX:N/A),gpu:mi250:0(IDX:N/A)|idle|\n"
        "busy|gpu:mi300x:8|gpu:mi300x:8(IDX:0-7)|alloc|\n"
        "drained|gpu:mi300x:8|gpu:mi300x:0(IDX:N/A)|drain|\n"
        "garbage line\n"
    )
    nodes = parse_nodes(text, "mi300x")
    assert nodes == [
        NodeGres(name="vm", gpus=8, free=5),
        NodeGres(name="idle1", gpus=4, free=4),
        NodeGres(name="busy", gpus=8, free=0),
        NodeGres(name="drained", gpus=8, free=0),
    ]
    untyped = parse_nodes("idle1|gpu:mi300x:4,gpu:mi250:2|gpu:mi250:1(IDX:4)|idle|\n", None)
    assert untyped == [NodeGres(name="idle1", gpus=6, free=5)]
    assert parse_nodes("", None) is None


@pytest.mark.parametrize(
    ("gpus", "free", "max_parallel", "expected"),
    [
        ((4, 2, 2, 1, 1, 1), 4, None, 4),  # 4 of 8 free: hold those 4, not wait for 8
        ((4, 2, 2, 1, 1, 1), 8, None, 8),
        ((1, 1), 8, None, 2),  # no more than the suite can use at once
        ((8, 1), 4, None, 8),  # the biggest test decides when too few are free
        ((2, 2, 2, 2), 8, 2, 4),  # --max-parallel 2: two tests' GPUs
        ((0, 0), 8, None, 0),  # no GPU at all: an allocation without gres
    ],
)
def test_the_allocation_holds_what_the_suite_can_use_of_what_is_free(
    gpus: tuple[int, ...], free: int, max_parallel: int | None, expected: int
) -> None:
    nodes = [NodeGres(name="n", gpus=8, free=free), NodeGres(name="m", gpus=8, free=free - 1)]
    assert allocation_size(_jobs(*gpus), nodes, max_parallel) == expected


def test_without_sinfo_the_allocation_is_what_the_suite_can_use() -> None:
    assert allocation_size(_jobs(4, 2, 1), None) == 7


def test_tasks_cover_every_test_that_can_run_at_once() -> None:
    assert allocation_tasks(_jobs(4, 2, 2, 1, 1, 1), 4) == 3  # 1+1+1 fit, then a 2 does not
    assert allocation_tasks(_jobs(1, 1, 1, 1, 1, 1, 1, 1), 8) == 8
    assert allocation_tasks(_jobs(8, 0, 0), 8) == 3  # steps without GPUs need a task each
    assert allocation_tasks(_jobs(1, 1, 1, 1), 4, max_parallel=2) == 2
    assert allocation_tasks([], 0) == 1


def test_the_time_limit_covers_every_attempt_at_its_limit_but_not_all_in_a_row() -> None:
    policy = RunPolicy(retries=2, retry_wait=30.0)
    jobs = [
        Job(name="a", gpus=1, estimate=100.0),  # 200 s → 4 min
        Job(name="b", gpus=1, estimate=10.0, policy=policy),  # min-time 60 s x 3 + 2 waits
    ]
    serial = 240 + 3 * 60 + 60
    assert allocation_seconds(SETTINGS, jobs, 1) == serial  # one GPU: one after another
    assert allocation_seconds(SETTINGS, jobs, 2) == 2 * 240  # side by side, doubled
    argv = salloc_argv(SETTINGS, jobs, name="rocmenv-x-suite", gpus=4, tasks=3)
    assert argv[:3] == ["salloc", "--no-shell", "--job-name=rocmenv-x-suite"]
    assert "--ntasks=3" in argv and "--gres=gpu:mi300x:4" in argv
    assert "--partition=gpu" in argv and argv[-1] == "--time=8"
    # 40 one-GPU tests of 20 minutes on 8 GPUs: ~2 h, not the 13 h of all in a row
    many = [Job(name=f"t{i}", gpus=1, estimate=600.0) for i in range(40)]
    assert allocation_seconds(SETTINGS, many, 8) == 2 * 5 * 1200
    assert allocation_seconds(SETTINGS, [], 0) == 0


def test_a_step_asks_for_exactly_its_gpus_and_none_means_none() -> None:
    args = step_args(SETTINGS, 2, time_seconds=100)
    assert args == ["--nodes=1", "--ntasks=1", "--exact", "--gres=gpu:mi300x:2", "--time=4"]
    # a step without --gres would get every GPU of the allocation
    assert "--gres=none" in step_args(SETTINGS, 0, time_seconds=1)
    gpus = SlurmSettings(gpu_request="gpus")
    assert "--gpus=1" in step_args(gpus, 1, time_seconds=1)


def test_packing_is_rocmenv_by_default_and_a_typo_gets_did_you_mean() -> None:
    assert SlurmSettings().packing == "rocmenv"
    assert parse_slurm({"packing": "slurm"}, "[slurm]").packing == "slurm"
    with pytest.raises(ConfigError, match="did you mean 'slurm'"):
        parse_slurm({"packing": "slurn"}, "[slurm]")
