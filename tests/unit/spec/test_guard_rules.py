"""The untrusted guard's fixed rules, one case per entry of each list (issue 21: a mutant that
stopped refusing `/var/lib/docker`, or allowed one more capability, survived the old tests,
which tried only some of them)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from rocmenv.errors import PolicyViolation
from rocmenv.settings.policy import Policy
from rocmenv.settings.profiles import BUILTIN_PROFILES, Mount
from rocmenv.spec.guard import Guard
from rocmenv.spec.hostpaths import FORBIDDEN_EXACT, FORBIDDEN_ROOTS
from rocmenv.spec.plan import build_spec
from rocmenv.spec.runspec import HostFacts, Overrides

# capabilities(7), without the CAP_ prefix
CAPABILITIES = (
    "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF", "CHECKPOINT_RESTORE",
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER",
    "KILL", "LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN",
    "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP",
    "SETUID", "SYSLOG", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE", "SYS_NICE",
    "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG",
    "WAKE_ALARM", "ALL",
)  # fmt: skip
# Every mount the denylist refuses, even when the policy's allowlist admits all of /.
OPEN_ALLOWLIST = Guard(policy=Policy(mount_sources=("/",)))


def facts(tmp_path: Path) -> HostFacts:
    checkout = tmp_path / "repo"
    (checkout / ".git").mkdir(parents=True, exist_ok=True)
    return HostFacts(
        env={}, cwd=checkout, checkout=checkout, inventory=None,
        path_exists=lambda _p: True, realpath=os.path.realpath,
    )  # fmt: skip


def untrusted(profile_changes: dict[str, object], tmp_path: Path, guard: Guard | None = None):  # type: ignore[no-untyped-def]
    profile = replace(BUILTIN_PROFILES["cpu"], name="fork", source="/fork/rocmenv.toml",
                      **profile_changes)  # type: ignore[arg-type]  # fmt: skip
    return build_spec(profile, Overrides(), facts(tmp_path), image="IMAGE", guard=guard or Guard())


@pytest.mark.parametrize("root", FORBIDDEN_ROOTS)
@pytest.mark.parametrize("below", ["", "/some/thing"])
def test_every_forbidden_root_and_what_is_below_it_is_refused(
    root: str, below: str, tmp_path: Path
) -> None:
    mount = Mount(source=root + below, target="/mnt/x")
    with pytest.raises(PolicyViolation, match="mounts = "):
        untrusted({"mounts": (mount,)}, tmp_path, OPEN_ALLOWLIST)


@pytest.mark.parametrize("path", FORBIDDEN_EXACT)
def test_every_forbidden_directory_itself_is_refused(path: str, tmp_path: Path) -> None:
    with pytest.raises(PolicyViolation, match="mounts = "):
        untrusted({"mounts": (Mount(source=path, target="/mnt/x"),)}, tmp_path, OPEN_ALLOWLIST)


def test_the_lists_name_the_engine_state_and_system_directories() -> None:
    """What the cases above cover (a list that lost an entry would lose its case silently)."""
    assert {"/var/lib/docker", "/var/lib/containers", "/var/lib/kubelet", "/boot", "/proc", "/sys",
            "/dev", "/etc", "/root", "/home", "/run", "/var/run"} <= set(FORBIDDEN_ROOTS)  # fmt: skip
    assert {"/", "/usr", "/lib", "/bin", "/var", "/var/lib", "/var/tmp", "/tmp"} <= set(
        FORBIDDEN_EXACT
    )


@pytest.mark.parametrize("cap", CAPABILITIES)
@pytest.mark.parametrize("spelling", ["{}", "CAP_{}", "{lower}"])
def test_the_default_policy_adds_no_capability(cap: str, spelling: str, tmp_path: Path) -> None:
    name = spelling.format(cap, lower=cap.lower())
    if cap == "SYS_PTRACE":  # the reference CI's: dropped with a note, not refused
        spec = untrusted({"cap_add": (name,)}, tmp_path)
        assert spec.cap_add == () and f"cap-add {name} dropped" in spec.notes[0]
        return
    with pytest.raises(PolicyViolation, match=f"cap-add = '{name}': no added capabilities"):
        untrusted({"cap_add": (name,)}, tmp_path)


def test_a_policy_allows_exactly_the_capabilities_it_names(tmp_path: Path) -> None:
    guard = Guard(policy=Policy(cap_add=("SYS_NICE",)))
    spec = untrusted({"cap_add": ("SYS_NICE", "CAP_SYS_NICE")}, tmp_path, guard)
    assert spec.cap_add == ("SYS_NICE", "CAP_SYS_NICE")
    with pytest.raises(PolicyViolation, match="NET_ADMIN"):
        untrusted({"cap_add": ("SYS_NICE", "NET_ADMIN")}, tmp_path, guard)
