"""Issue 31, item 3: the caps of an untrusted container (rocmenv/container/caps.py) and the
policy keys that set them (rocmenv/settings/policy.py). The real engines enforce them in
tests/integration/run/test_caps.py."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from rocmenv.container.caps import cap
from rocmenv.container.guard import Guard
from rocmenv.container.plan import build_spec
from rocmenv.container.runspec import HostFacts, Overrides, RunSpec
from rocmenv.errors import ConfigError, PolicyViolation
from rocmenv.settings.policy import DEFAULT_POLICY, Policy, policy_from_table
from rocmenv.settings.profiles import BUILTIN_PROFILES, Ulimit

GIB = 1 << 30
FORK = {"name": "fork", "source": "/fork/rocmenv.toml"}


def facts(tmp_path: Path, memory: int | None = 64 * GIB, here: bool = True) -> HostFacts:
    checkout = tmp_path / "repo"
    checkout.mkdir(exist_ok=True)
    return HostFacts(
        env={}, cwd=checkout, checkout=checkout, inventory=None, check_host=here,
        path_exists=lambda _p: True, realpath=os.path.realpath, memory_total=lambda: memory,
    )  # fmt: skip


def fork(tmp_path: Path, policy: Policy = DEFAULT_POLICY, /, **changes: object) -> RunSpec:
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK, mounts=(), **changes)  # type: ignore[arg-type]
    return build_spec(profile, Overrides(), facts(tmp_path), image="IMAGE",
                      guard=Guard(policy=policy))  # fmt: skip


def test_a_profile_asking_nothing_gets_every_cap_of_the_default_policy(tmp_path: Path) -> None:
    spec = fork(tmp_path)
    assert spec.pids_limit == 8192
    assert spec.memory == spec.memory_swap == f"{48 * 1024}m"  # 75 % of 64 GiB, no swap
    assert spec.shm_size == "32g"  # the profile's, within the cap
    limits = {u.name: (u.soft, u.hard) for u in spec.ulimits}
    assert limits == {"core": (0, 0), "nice": (0, 0), "rtprio": (0, 0)}
    assert (
        "; memory 49152m (no swap); pids-limit 8192; ulimits core=0,nice=0,rtprio=0;"
        in (spec.notes[0])
    )


def test_the_built_in_no_limit_memory_becomes_the_policys(tmp_path: Path) -> None:
    """The rocm profile's ``memory = "0"`` is Docker's "no limit": untrusted, the cap."""
    spec = fork(tmp_path, memory="0", memory_swap="0")
    assert spec.memory == spec.memory_swap == "49152m"


def test_what_a_profile_asks_within_the_caps_is_kept(tmp_path: Path) -> None:
    spec = fork(tmp_path, memory="8g", memory_swap="16g", pids_limit=512, shm_size="1g",
                ulimits=(Ulimit(name="core", soft=0, hard=0),
                         Ulimit(name="nproc", soft=100, hard=200)))  # fmt: skip
    assert (spec.memory, spec.memory_swap, spec.pids_limit, spec.shm_size) == (
        "8g",
        "16g",
        512,
        "1g",
    )
    assert {u.name for u in spec.ulimits} == {"core", "nproc", "nice", "rtprio"}


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"pids_limit": 100000}, "pids-limit = '100000'"),
        ({"memory": "64g"}, "memory = '64g'"),
        ({"memory": "8g", "memory_swap": "100g"}, "memory-swap = '100g'"),
        ({"shm_size": "100000g"}, "shm-size = '100000g'"),
        ({"ulimits": (Ulimit(name="core", soft=-1, hard=-1),)}, "ulimits.core = 'core=-1'"),
        ({"ulimits": (Ulimit(name="rtprio", soft=0, hard=99),)}, "ulimits.rtprio = 'rtprio=0:99'"),
        ({"ulimits": (Ulimit(name="nice", soft=10, hard=10),)}, "ulimits.nice = 'nice=10'"),
        ({"ulimits": (Ulimit(name="nproc", soft=-1, hard=-1),)}, "ulimits.nproc = 'nproc=-1'"),
        ({"ulimits": (Ulimit(name="nproc", soft=9000, hard=9000),)}, "ulimits.nproc"),
    ],
)
def test_a_profile_asking_beyond_a_cap_is_refused_naming_the_key(
    tmp_path: Path, changes: dict[str, object], named: str
) -> None:
    with pytest.raises(PolicyViolation) as err:
        fork(tmp_path, **changes)
    assert named in err.value.what


def test_every_cap_refused_is_in_the_one_message_with_the_other_rules(tmp_path: Path) -> None:
    with pytest.raises(PolicyViolation) as err:
        fork(tmp_path, network="host", memory="1t", pids_limit=10**6)
    text = err.value.what
    assert "memory = '1t'" in text and "pids-limit = '1000000'" in text
    assert "network = 'host'" in text


def test_unlimited_swap_is_refused(tmp_path: Path) -> None:
    draft = RunSpec(image="IMAGE", memory="1g", memory_swap="-1")
    _values, _changes, refused = cap(draft, DEFAULT_POLICY, facts(tmp_path))
    assert [key for key, _v, _r in refused] == ["memory-swap"]


def test_a_sites_ulimits_change_one_maximum_and_keep_the_others() -> None:
    policy = policy_from_table({"ulimits": {"core": -1}}, "[policy] in site")
    assert {u.name: u.hard for u in policy.ulimits} == {"core": -1, "nice": 0, "rtprio": 0}


def test_an_unlimited_maximum_is_not_set_and_allows_anything(tmp_path: Path) -> None:
    policy = policy_from_table({"ulimits": {"core": -1}}, "[policy] in site")
    spec = fork(tmp_path, policy, ulimits=(Ulimit(name="core", soft=-1, hard=-1),))
    assert Ulimit(name="core", soft=-1, hard=-1) in spec.ulimits
    assert {u.name for u in fork(tmp_path, policy).ulimits} == {"nice", "rtprio"}


def test_a_share_of_memory_needs_the_hosts_memory(tmp_path: Path) -> None:
    draft = RunSpec(image="IMAGE")
    with pytest.raises(ConfigError, match="/proc/meminfo"):
        cap(draft, DEFAULT_POLICY, facts(tmp_path, memory=None))
    values, _c, _r = cap(draft, replace(DEFAULT_POLICY, memory="2g"), facts(tmp_path, None))
    assert values["memory"] == "2048m"


def test_a_rendering_for_another_host_leaves_a_share_out_and_says_so(tmp_path: Path) -> None:
    draft = RunSpec(image="IMAGE", memory="0")
    values, changes, refused = cap(draft, DEFAULT_POLICY, facts(tmp_path, here=False))
    assert "memory" not in values and refused == []
    assert "memory: the policy's 75% of the runner's memory is not rendered" in changes[0]


@pytest.mark.parametrize(
    "table",
    [
        {"pids-limit": 0},
        {"pids-limit": "many"},
        {"memory": "0"},
        {"memory": "150%"},
        {"memory": "lots"},
        {"shm-size": "0g"},
        {"ulimits": 3},
        {"ulimits": {"core": "x"}},
        {"output-size": "big"},
    ],
)
def test_a_bad_cap_in_a_policy_file_is_a_config_error_naming_it(table: dict[str, object]) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_table(table, "policy file /etc/rocmenv/policy.toml")
    assert next(iter(table)) in err.value.what


def test_caps_of_a_policy_file_replace_the_defaults() -> None:
    policy = policy_from_table(
        {"pids-limit": 64, "memory": "50%", "shm-size": "1g", "output-size": "10m"}, "x"
    )
    assert (policy.pids_limit, policy.memory, policy.shm_size, policy.output_size) == (
        64,
        "50%",
        "1g",
        "10m",
    )
