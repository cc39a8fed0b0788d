"""The untrusted guard's fixed rules, one case per entry of each list (issue 21: a mutant that
stopped refusing `/var/lib/docker`, or allowed one more capability, survived the old tests,
which tried only some of them)."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from rocmenv.container.guard import UNTRUSTED_CAP_DROP, Guard, builtin_mount_sources
from rocmenv.container.hostpaths import FORBIDDEN_EXACT, FORBIDDEN_ROOTS
from rocmenv.container.plan import build_spec
from rocmenv.container.runspec import HostFacts, Overrides
from rocmenv.errors import PolicyViolation, UsageError
from rocmenv.settings.policy import Policy
from rocmenv.settings.profiles import BUILTIN_PROFILES, Mount

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
        path_exists=lambda _p: True, realpath=os.path.realpath, memory_total=lambda: 64 << 30,
    )  # fmt: skip


def untrusted(profile_changes: dict[str, object], tmp_path: Path, guard: Guard | None = None):
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


# -- the notice line and each neutralisation (issue 21) ----------------------------------------

FORK = {"name": "fork", "source": "/fork/rocmenv.toml"}


def fork_of(base: str, tmp_path: Path, guard: Guard, **changes: object):
    profile = replace(BUILTIN_PROFILES[base], **FORK, **changes)  # type: ignore[arg-type]
    return build_spec(profile, Overrides(), facts(tmp_path), image="IMAGE", guard=guard)


def test_the_notice_lists_every_change_of_the_reference_profile_from_a_fork_in_order(
    tmp_path: Path,
) -> None:
    spec = fork_of("rocm", tmp_path, OPEN_ALLOWLIST, secret_env=("HF_TOKEN", "WANDB_KEY"),
                   pass_env=("FOO", "BAR"), keep_proxy_env=True)  # fmt: skip
    assert spec.notes[0] == (
        "untrusted mode: policy built-in; privileged refused; ipc host -> private /dev/shm (32g); "
        "cap-add SYS_PTRACE dropped; cap-drop MKNOD,SETFCAP,FSETID,NET_RAW,AUDIT_WRITE,SETPCAP,"
        "SYS_CHROOT; security-opt seccomp=unconfined dropped; pass-env FOO,BAR not passed; "
        "keep-proxy-env ignored; memory 49152m (no swap); pids-limit 8192; "
        "ulimits core=0,nice=0,rtprio=0; 4 data mount(s) read-only; the checkout "
        "copy-on-write; secrets not passed: HF_TOKEN, WANDB_KEY"
    )
    assert (spec.ipc, spec.cap_add, spec.security_opt) == ("private", (), ())
    assert spec.untrusted and all(m.readonly for m in spec.mounts if m.target != spec.checkout)
    assert not any(m.host_writable for m in spec.mounts)


def test_without_a_git_directory_the_notice_counts_only_the_data_mounts(tmp_path: Path) -> None:
    profile = replace(BUILTIN_PROFILES["rocm"], **FORK)  # type: ignore[arg-type]
    host = replace(facts(tmp_path), path_exists=lambda p: not p.endswith("/.git"))
    spec = build_spec(profile, Overrides(), host, image="IMAGE", guard=OPEN_ALLOWLIST)
    assert "; 4 data mount(s) read-only" in spec.notes[0]
    assert not any(m.target.endswith("/.git") for m in spec.mounts)


def test_what_the_policy_allows_is_kept_and_not_listed_as_changed(tmp_path: Path) -> None:
    policy = Policy(cap_add=("SYS_PTRACE", "cap_mknod"), security_opt=("seccomp=unconfined",),
                    pass_env=("FOO",), mount_sources=("/",))  # fmt: skip
    spec = fork_of("rocm", tmp_path, Guard(policy=policy), pass_env=("FOO", "BAR"))
    assert spec.cap_add == ("SYS_PTRACE",) and spec.security_opt == ("seccomp=unconfined",)
    assert "MKNOD" not in spec.cap_drop and "SETFCAP" in spec.cap_drop
    notice = spec.notes[0]
    assert "cap-add" not in notice and "security-opt" not in notice
    assert "cap-drop SETFCAP,FSETID,NET_RAW,AUDIT_WRITE,SETPCAP,SYS_CHROOT;" in notice
    assert "pass-env BAR not passed" in notice


def test_a_capability_the_profile_drops_already_is_not_dropped_twice(tmp_path: Path) -> None:
    spec = fork_of("cpu", tmp_path, Guard(), cap_drop=("cap_mknod", "NET_ADMIN"))
    assert spec.cap_drop == ("cap_mknod", "NET_ADMIN", *UNTRUSTED_CAP_DROP[1:])


def test_a_profile_from_the_trusted_config_keeps_its_pass_env_and_proxies(tmp_path: Path) -> None:
    guard = Guard(policy=Policy(mount_sources=("/",)), config_trusted=True)
    spec = fork_of("rocm", tmp_path, guard, pass_env=("FOO",), keep_proxy_env=True)
    assert "pass-env" not in spec.notes[0] and "keep-proxy-env" not in spec.notes[0]
    assert Guard(trusted_sources=("/site.toml",)).trusts(
        replace(BUILTIN_PROFILES["cpu"], source="/site.toml")
    )
    assert not Guard().trusts(replace(BUILTIN_PROFILES["cpu"], **FORK))  # type: ignore[arg-type]


def test_a_secret_passed_by_e_is_refused_naming_it(tmp_path: Path) -> None:
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK, secret_env=("HF_TOKEN",))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"^-e HF_TOKEN: HF_TOKEN is a secret of profile 'fork' "
                       "and untrusted mode passes no secrets$"):  # fmt: skip
        build_spec(profile, Overrides(env=("HF_TOKEN=x",)), facts(tmp_path), image="IMAGE",
                   guard=Guard())  # fmt: skip


NEVER = "never a root-equivalent group, whatever the policy"
ONLY = "only video/render (the GPU nodes' groups)"


@pytest.mark.parametrize(
    ("groups", "gids", "refused"),
    [
        (("video", "render"), {}, []),
        (("44", "109"), {"video": 44, "render": 109}, []),
        (("45",), {"video": 44}, [("45", ONLY)]),
        (("docker",), {}, [("docker", NEVER)]),
        (("998",), {"docker": 998}, [("998", NEVER)]),
        (("0", "wheel"), {}, [("0", NEVER), ("wheel", ONLY)]),
    ],
)
def test_groups_pass_by_name_or_gid_and_root_equivalent_ones_never(
    groups: tuple[str, ...], gids: dict[str, int], refused: list[tuple[str, str]]
) -> None:
    assert Guard()._group_problems(groups, gids.get) == refused


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("IMAGE", None),
        ("rocm/sgl-dev:v1", None),
        ("docker.io/rocm/sgl-dev@sha256:" + "a" * 64, None),
        ("mirror.example/rocm/sgl-dev:v1", None),
        (
            "other.example/rocm/sgl-dev:v1",
            "only images of docker.io/rocm/sgl-dev (and their trusted mirrors)",
        ),
        (
            "mirror.example/rocm/other:v1",
            "only images of docker.io/rocm/sgl-dev (and their trusted mirrors)",
        ),
        ("Not A Reference", "not a valid image reference"),
    ],
)
def test_images_of_the_allowed_repositories_or_their_trusted_mirrors_only(
    image: str, problem: str | None
) -> None:
    guard = Guard(mirrors=(("docker.io", "mirror.example"),))
    assert guard._image_problem(image) == problem


def test_check_image_refuses_naming_the_profile_and_the_rule() -> None:
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK)  # type: ignore[arg-type]
    Guard().check_image("rocm/sgl-dev:v1", profile)
    with pytest.raises(PolicyViolation) as err:
        Guard().check_image("evil/x:1", profile)
    assert str(err.value.what) == (
        "untrusted mode: the policy (built-in) refuses profile 'fork' (/fork/rocmenv.toml): "
        "image = 'evil/x:1': only images of docker.io/rocm/sgl-dev (and their trusted mirrors)"
    )


def test_the_declared_sources_are_the_outermost_of_the_trusted_mounts_sorted() -> None:
    extra = replace(BUILTIN_PROFILES["cpu"], mounts=(
        Mount(source="/zz/models", target="/m"), Mount(source="/aa", target="/a"),
        Mount(source="/aa/b", target="/b"), Mount(source="/data/miles_ci/x", target="/x"),
    ))  # fmt: skip
    assert builtin_mount_sources() == ("/data/miles_ci",)
    assert builtin_mount_sources([extra]) == ("/aa", "/data/miles_ci", "/zz/models")
    assert Guard().declared_sources == ("/data/miles_ci",)
    assert Guard(policy=Policy(mount_sources=("/p",))).declared_sources == ("/p",)
    assert Guard(policy=Policy(mount_sources=("/p",)), mount_sources=()).declared_sources == ()


def test_an_undeclared_mount_names_the_declared_sources(tmp_path: Path) -> None:
    with pytest.raises(PolicyViolation) as err:
        untrusted({"mounts": (Mount(source="/srv/x", target="/x"),)}, tmp_path,
                  Guard(mount_sources=()))  # fmt: skip
    assert "mounts = '/srv/x:/x': data mounts only under the sources the trusted side declared " \
        "(none: the policy's mount-sources" in str(err.value.what)  # fmt: skip


def test_an_undeclared_mount_lists_every_declared_source(tmp_path: Path) -> None:
    with pytest.raises(PolicyViolation) as err:
        untrusted({"mounts": (Mount(source="/srv/x", target="/x"),)}, tmp_path,
                  Guard(mount_sources=("/data", "/models")))  # fmt: skip
    assert (
        "mounts = '/srv/x:/x': data mounts only under the sources the trusted side declared "
        "(/data, /models: the policy's mount-sources, else the trusted config's profile mounts); "
        "the checkout itself is mounted at its own path already"
    ) in str(err.value.what)


def test_a_device_other_than_kfd_and_the_gpus_is_refused_naming_the_rule(tmp_path: Path) -> None:
    with pytest.raises(PolicyViolation) as err:
        untrusted({"devices": ("/dev/sda",)}, tmp_path)
    assert "devices = '/dev/sda': only /dev/kfd and the selected GPUs' nodes" in err.value.what


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"security_opt": ("apparmor=unconfined",)},
         "security-opt = 'apparmor=unconfined': no unconfined or custom security options "
         "(no-new-privileges only)"),
        ({"network": "host"}, "network = 'host': no host or container network namespace"),
        ({"network": "container:db"},
         "network = 'container:db': no host or container network namespace"),
        ({"ipc": "container:db"}, "ipc = 'container:db': no host or container IPC namespace"),
        ({"group_add": ("docker",)},
         "group-add = 'docker': never a root-equivalent group, whatever the policy"),
    ],
)  # fmt: skip
def test_each_refusal_names_key_value_and_rule(
    changes: dict[str, object], refusal: str, tmp_path: Path
) -> None:
    with pytest.raises(PolicyViolation) as err:
        untrusted(changes, tmp_path)
    assert err.value.what == (
        "untrusted mode: the policy (built-in) refuses profile 'fork' (/fork/rocmenv.toml): "
        + refusal
    )


def test_no_new_privileges_and_private_namespaces_pass(tmp_path: Path) -> None:
    spec = untrusted({"security_opt": ("no-new-privileges:true",), "ipc": "shareable",
                      "network": None}, tmp_path)  # fmt: skip
    assert spec.security_opt == ("no-new-privileges:true",) and spec.ipc == "shareable"


def test_apply_refuses_an_image_the_policy_does_not_allow_naming_it(tmp_path: Path) -> None:
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK)  # type: ignore[arg-type]
    draft = build_spec(profile, Overrides(), facts(tmp_path), image="evil.example/x:1", guard=None)
    with pytest.raises(PolicyViolation) as err:
        Guard().apply(draft, profile, facts(tmp_path))
    assert err.value.what.endswith(
        "image = 'evil.example/x:1': only images of docker.io/rocm/sgl-dev (and their trusted "
        "mirrors)"
    )


def test_a_checkout_that_is_a_system_directory_is_refused_naming_it(tmp_path: Path) -> None:
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK)  # type: ignore[arg-type]
    host = replace(facts(tmp_path), cwd=Path("/usr"), checkout=Path("/usr"))
    with pytest.raises(PolicyViolation) as err:
        build_spec(profile, Overrides(), host, image="IMAGE", guard=Guard())
    assert err.value.what.endswith(
        "the checkout (the working directory's git top level) = '/usr': not / or a directory "
        "holding system paths, the engine's socket or the runner"
    )


def test_only_the_forks_pass_env_and_proxy_variables_are_dropped(tmp_path: Path) -> None:
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK, pass_env=("FOO", "BAR"),  # type: ignore[arg-type]
                      keep_proxy_env=True)  # fmt: skip
    host = replace(facts(tmp_path), env={"FOO": "1", "BAR": "2", "HTTPS_PROXY": "http://p:3128"})
    guard = Guard(policy=Policy(pass_env=("BAR",)))
    spec = build_spec(
        profile, Overrides(env=("FOO=cli", "KEEP=1")), host, image="IMAGE", guard=guard
    )
    env = {(e.name, e.value) for e in spec.env}
    assert {("FOO", "cli"), ("KEEP", "1"), ("BAR", "2")} <= env  # -e is the workflow's own
    assert ("FOO", "1") not in env and not any(name == "HTTPS_PROXY" for name, _ in env)
    assert "secrets not passed" not in spec.notes[0]


def test_every_refusal_of_a_profile_is_in_one_message(tmp_path: Path) -> None:
    with pytest.raises(PolicyViolation) as err:
        untrusted({"network": "host", "ipc": "container:db"}, tmp_path)
    assert err.value.what.endswith(
        ": network = 'host': no host or container network namespace; "
        "ipc = 'container:db': no host or container IPC namespace"
    )


def test_a_data_mount_over_the_checkouts_git_is_read_only_in_the_view(tmp_path: Path) -> None:
    """No conflict any more (``.git`` is not bound apart): the data mount shows over the
    view's ``.git`` in the container, read-only, and the host's ``.git`` is not mounted."""
    git = str(tmp_path / "repo" / ".git")
    spec = untrusted({"mounts": (Mount(source="/data/miles_ci/x", target=git),)}, tmp_path)
    (over,) = [m for m in spec.mounts if m.target == git]
    assert over.source == "/data/miles_ci/x" and over.readonly
    assert not any(m.source == git for m in spec.mounts)


@pytest.mark.parametrize("char", [",", ":", "\\", "\n"])
def test_a_checkout_path_the_overlay_options_cannot_carry_is_refused(
    tmp_path: Path, char: str
) -> None:
    checkout = tmp_path / f"re{char}po"
    checkout.mkdir()
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK)  # type: ignore[arg-type]
    host = replace(facts(tmp_path), cwd=checkout, checkout=checkout)
    with pytest.raises(PolicyViolation) as err:
        build_spec(profile, Overrides(), host, image="IMAGE", guard=Guard())
    assert repr(char) in err.value.what and "copy-on-write" in err.value.what
    trusted = build_spec(profile, Overrides(), host, image="IMAGE")  # a bind: any path
    assert next(m for m in trusted.mounts if m.target == str(checkout)).host_writable


def test_apply_refuses_a_privileged_draft_naming_the_profile(tmp_path: Path) -> None:
    """The guard's own check, not only the planner's before it builds anything."""
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK, privileged=True)  # type: ignore[arg-type]
    draft = build_spec(profile, Overrides(), facts(tmp_path), image="IMAGE", guard=None)
    with pytest.raises(UsageError) as err:
        Guard().apply(draft, profile, facts(tmp_path))
    assert err.value.what == (
        "profile 'fork' is privileged and this run is untrusted (--untrusted, untrusted = true "
        "or ROCMENV_UNTRUSTED=1): refused"
    )
    assert err.value.hint == "use a profile without privileged = true for untrusted code"


def test_a_secret_passed_by_name_from_the_host_is_refused_too(tmp_path: Path) -> None:
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK, secret_env=("HF_TOKEN",))  # type: ignore[arg-type]
    host = replace(facts(tmp_path), env={"HF_TOKEN": "hf_secret"})
    with pytest.raises(UsageError, match=r"^-e HF_TOKEN: HF_TOKEN is a secret of profile 'fork'"):
        build_spec(profile, Overrides(env=("HF_TOKEN",)), host, image="IMAGE", guard=Guard())


def test_the_notice_says_env_isolation_became_devices(tmp_path: Path) -> None:
    spec = untrusted({"gpu_isolation": "env"}, tmp_path)
    assert "; gpu-isolation env -> devices; " in spec.notes[0]
    assert "gpu-isolation" not in untrusted({}, tmp_path).notes[0]


def test_host_ipc_without_a_shm_size_becomes_the_engines_default_shm(tmp_path: Path) -> None:
    spec = untrusted({"ipc": "host", "shm_size": None}, tmp_path)
    assert spec.ipc == "private"
    assert "; ipc host -> private /dev/shm (default); " in spec.notes[0]


def test_every_dropped_spelling_of_the_reference_options_is_named(tmp_path: Path) -> None:
    spec = untrusted({"cap_add": ("SYS_PTRACE", "cap_sys_ptrace"),
                      "security_opt": ("seccomp=unconfined", "seccomp=unconfined")}, tmp_path)  # fmt: skip
    assert "; cap-add SYS_PTRACE,cap_sys_ptrace dropped; " in spec.notes[0]
    assert "; security-opt seccomp=unconfined,seccomp=unconfined dropped" in spec.notes[0]
    assert (spec.cap_add, spec.security_opt) == ((), ())


def test_a_read_only_checkout_is_not_counted_as_a_data_mount(tmp_path: Path) -> None:
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK)  # type: ignore[arg-type]
    draft = build_spec(profile, Overrides(), facts(tmp_path), image="IMAGE", guard=None)
    mounts = tuple(replace(m, readonly=True) if m.target == draft.checkout else m
                   for m in draft.mounts)  # fmt: skip
    spec = Guard().apply(replace(draft, mounts=mounts), profile, facts(tmp_path))
    data = sum(1 for m in draft.mounts if m.target != draft.checkout)
    assert f"; {data} data mount(s) read-only; the checkout copy-on-write" in spec.notes[0]


def test_the_drafts_own_notes_follow_the_untrusted_notice(tmp_path: Path) -> None:
    profile = replace(BUILTIN_PROFILES["rocm"], **FORK)  # type: ignore[arg-type]
    host = replace(facts(tmp_path), check_host=True,
                   path_exists=lambda p: not p.startswith("/data/miles_ci"))  # fmt: skip
    spec = build_spec(profile, Overrides(), host, image="IMAGE", guard=OPEN_ALLOWLIST)
    assert spec.notes[0].startswith("untrusted mode: ")
    (skipped,) = spec.notes[1:]
    assert skipped.startswith("optional mounts skipped, source absent: /data/miles_ci, ")


def test_the_output_volume_stays_writable_and_is_not_checked_as_a_data_mount(
    tmp_path: Path,
) -> None:
    """``--output``: an empty engine volume the results leave through — neither made read-only
    with the data mounts nor refused as a host path (it has none)."""
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK, output="/results")  # type: ignore[arg-type]
    spec = build_spec(profile, Overrides(output=True), facts(tmp_path), image="IMAGE",
                      guard=Guard())  # fmt: skip
    (out,) = [m for m in spec.mounts if m.kind == "volume"]
    assert out.target == "/results" and not out.readonly


def test_a_checkout_path_with_a_space_gets_the_view(tmp_path: Path) -> None:
    """A space is no control character: the overlay's options carry it."""
    checkout = tmp_path / "my repo"
    (checkout / ".git").mkdir(parents=True)
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK)  # type: ignore[arg-type]
    host = replace(facts(tmp_path), cwd=checkout, checkout=checkout)
    spec = build_spec(profile, Overrides(), host, image="IMAGE", guard=Guard())
    assert next(m for m in spec.mounts if m.target == str(checkout)).kind == "overlay"


def test_a_refused_checkout_path_says_what_path_to_use(tmp_path: Path) -> None:
    checkout = tmp_path / "re,po"
    checkout.mkdir()
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK)  # type: ignore[arg-type]
    host = replace(facts(tmp_path), cwd=checkout, checkout=checkout)
    with pytest.raises(PolicyViolation) as err:
        build_spec(profile, Overrides(), host, image="IMAGE", guard=Guard())
    assert err.value.hint is not None and "without ','" in err.value.hint


def test_without_the_checkout_mounted_the_notice_claims_no_view(tmp_path: Path) -> None:
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK)  # type: ignore[arg-type]
    draft = build_spec(profile, Overrides(), facts(tmp_path), image="IMAGE", guard=None)
    mounts = tuple(m for m in draft.mounts if m.target != draft.checkout)
    spec = Guard().apply(replace(draft, mounts=mounts), profile, facts(tmp_path))
    assert "copy-on-write" not in spec.notes[0]
    assert re.search(r"\d+ data mount\(s\) read-only(;|$)", spec.notes[0]), spec.notes[0]


def test_a_mount_after_the_output_volume_is_still_checked(tmp_path: Path) -> None:
    """The output volume is skipped by the mount rules, not the end of them."""
    profile = replace(BUILTIN_PROFILES["cpu"], **FORK, output="/results")  # type: ignore[arg-type]
    draft = build_spec(profile, Overrides(output=True), facts(tmp_path), image="IMAGE",
                       guard=None)  # fmt: skip
    (volume,) = [m for m in draft.mounts if m.kind == "volume"]
    etc = replace(next(m for m in draft.mounts if m.kind != "volume"), source="/etc",
                  target="/mnt/etc", origin="profile")  # fmt: skip
    rest = tuple(m for m in draft.mounts if m is not volume)
    with pytest.raises(PolicyViolation, match="/etc"):
        Guard().apply(replace(draft, mounts=(volume, *rest, etc)), profile, facts(tmp_path))
