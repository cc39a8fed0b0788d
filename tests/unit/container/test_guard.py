"""Untrusted mode against a hostile fork's own files (issue 9): every attack refused or
neutralised, through the real CLI (``rocmenv options`` and ``rocmenv run``, which refuses
before it asks the engine anything)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from rocmenv.cli import main
from rocmenv.container.builder import build_runspec
from rocmenv.container.gpu import VISIBLE_DEVICE_VARS
from rocmenv.container.guard import Guard
from rocmenv.container.plan import build_spec
from rocmenv.container.render import render_compose
from rocmenv.container.runspec import HostFacts, Overrides, RunSpec
from rocmenv.context import Context
from rocmenv.errors import ConfigError, PolicyViolation, UsageError
from rocmenv.settings.policy import Policy, untrusted_env
from rocmenv.settings.profiles import BUILTIN_PROFILES, Mount, Profile
from rocmenv.settings.resolve import settings_for
from tests.support.fakegpu import FakeHost, build_fake_host
from tests.support.hostile import (
    FILE_ATTACKS,
    INJECTING_NAME,
    NEUTRALISED,
    REFUSED,
    SECRETS,
    write_checkout,
)

IMAGE = "rocm/sgl-dev:v0.5.8-rocm700-mi30x-20260215"


@pytest.fixture
def fake(tmp_path: Path) -> FakeHost:
    return build_fake_host(tmp_path / "host", char_devices=False)


def cli(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cwd: Path,
    env: Mapping[str, str],
    *argv: str,
) -> tuple[int, str, str]:
    for key in list(os.environ):
        if key.startswith("ROCMENV_") or key in SECRETS or key in VISIBLE_DEVICE_VARS:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(cwd)
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def guarded(
    profile: Profile,
    overrides: Overrides,
    facts: HostFacts,
    *,
    image: str,
    guard: Guard | None = None,
) -> RunSpec:
    """The planner's spec: the guard applies when ``ROCMENV_UNTRUSTED`` in the facts' environment
    says untrusted (the settings resolver's rule) or one is given."""
    if guard is None and untrusted_env(facts.env):
        guard = Guard()
    return build_spec(profile, overrides, facts, image=image, guard=guard)


def hostile_env(fake: FakeHost, **extra: str) -> dict[str, str]:
    return {**fake.env(), **SECRETS, "ROCMENV_UNTRUSTED": "1", **extra}


# -- ROCMENV_UNTRUSTED -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), ("YES", True), ("0", False), ("false", False), ("no", False)],
)
def test_untrusted_variable_takes_only_yes_and_no_words(value: str, expected: bool) -> None:
    assert untrusted_env({"ROCMENV_UNTRUSTED": value}) is expected
    assert untrusted_env({}) is False


@pytest.mark.parametrize("value", ["maybe", "y", "2", "", "on", "truee"])
def test_untrusted_variable_fails_closed_on_anything_else(
    value: str,
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(UsageError, match="neither true nor false"):
        untrusted_env({"ROCMENV_UNTRUSTED": value})
    root = write_checkout(tmp_path / "fork", {})
    code, out, err = cli(
        monkeypatch, capsys, root, {**fake.env(), "ROCMENV_UNTRUSTED": value}, "options"
    )
    assert code == 2 and out == ""
    assert "ROCMENV_UNTRUSTED" in err and "Traceback" not in err


def test_untrusted_false_in_the_profile_cannot_switch_it_off(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = write_checkout(tmp_path / "fork", {**NEUTRALISED["untrusted-false"], "cap-add": ["ALL"]})
    for env, flags in ((hostile_env(fake), ()), (fake.env(), ("--untrusted",))):
        code, _out, err = cli(monkeypatch, capsys, root, env, "options", *flags)
        assert code == 2 and "cap-add = 'ALL'" in err


# -- refused: every key, from rocmenv.toml and from pyproject.toml, by options and run --------


@pytest.mark.parametrize("where", ["rocmenv.toml", "pyproject.toml"])
@pytest.mark.parametrize("attack", sorted(REFUSED))
@pytest.mark.parametrize("command", ["options", "run"])
def test_each_refused_attack_exits_2_naming_key_value_and_rule(
    attack: str,
    where: str,
    command: str,
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table, named = REFUSED[attack]
    root = write_checkout(tmp_path / "fork", table, where=where)  # type: ignore[arg-type]
    argv = ["options", "--format", "docker"] if command == "options" else ["run", "--", "id"]
    # an engine that does not exist: run must refuse before it asks one
    env = hostile_env(fake, DOCKER_HOST="unix:///nonexistent/docker.sock")
    code, out, err = cli(monkeypatch, capsys, root, env, *argv)
    assert code == 2, err
    assert out == ""
    key = {"mount": "mounts", "ipc": "ipc"}.get(attack.split("-")[0], attack)
    assert f"{key} = " in err and named in err and "untrusted mode" in err
    assert "refuses" in err and "ROCMENV_POLICY" in err  # the rule and what to do
    assert "Traceback" not in err


def test_trusted_mode_renders_the_same_attacks_it_is_told_to(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The refusals come from untrusted mode, not from some other check."""
    table: dict[str, object] = {}
    for attack in ("cap-add", "security-opt", "network", "group-add"):
        table.update(REFUSED[attack][0])
    root = write_checkout(tmp_path / "fork", table)
    code, out, err = cli(monkeypatch, capsys, root, fake.env(), "options", "--format", "docker")
    assert code == 0, err
    args = shlex.split(out)
    assert "--cap-add=ALL" in args and "--network=host" in args and "--group-add=0" in args


def test_all_refusals_of_one_profile_are_reported_together(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table: dict[str, object] = {}
    for attack in ("devices", "cap-add", "security-opt", "network", "group-add", "mount-root"):
        table.update(REFUSED[attack][0])
    root = write_checkout(tmp_path / "fork", table)
    code, _out, err = cli(monkeypatch, capsys, root, hostile_env(fake), "options")
    assert code == 2
    for needle in ("/dev/sda", "/dev/mem", "'ALL'", "apparmor=unconfined",
                   "systempaths=unconfined", "network = 'host'", "'docker'", "'0'", "'disk'",
                   "/:/host"):  # fmt: skip
        assert needle in err, needle


# -- neutralised: the job runs, the attack is gone, the notice says what changed ---------------


def neutralised_args(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *extra: str,
    env: Mapping[str, str] | None = None,
) -> tuple[list[str], str]:
    table: dict[str, object] = {}
    for attack in ("pass-env", "gpu-isolation", "ipc-host", "untrusted-false"):
        table.update(NEUTRALISED[attack])
    table["secret-env"] = ["WANDB_API_KEY"]
    table["pass-env"] = [*SECRETS, "HTTPS_PROXY"]
    table["keep-proxy-env"] = True
    root = write_checkout(tmp_path / "fork", table)
    code, out, err = cli(
        monkeypatch, capsys, root, {**hostile_env(fake), "HTTPS_PROXY": "http://p:1", **(env or {})},
        "options", "--format", "docker", *extra,
    )  # fmt: skip
    assert code == 0, err
    return shlex.split(out), err


def test_secrets_pass_env_and_proxies_of_an_untrusted_profile_are_not_passed(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args, err = neutralised_args(tmp_path, fake, monkeypatch, capsys, "--gpus", "0-3")
    env_args = [a for a in args if a.startswith("--env=")]
    for name in (*SECRETS, "HTTPS_PROXY"):
        assert not any(a.startswith(f"--env={name}") for a in env_args), name
    notice = [line for line in err.splitlines() if "untrusted mode" in line]
    assert len(notice) == 1
    assert "GITHUB_TOKEN" in notice[0] and "keep-proxy-env ignored" in notice[0]
    assert not any(value in err for value in SECRETS.values())


def test_gpu_isolation_is_by_nodes_and_every_visible_devices_variable_is_renumbered(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args, err = neutralised_args(
        tmp_path, fake, monkeypatch, capsys, "--gpus", "4-7",
        env={"HIP_VISIBLE_DEVICES": "4,5,6,7"},
    )  # fmt: skip
    devices = sorted(a.split("=", 1)[1].split(":")[1] for a in args if a.startswith("--device="))
    expected = sorted(
        ["/dev/kfd"]
        + [f"/dev/dri/{g.render_name}" for g in fake.gpus[4:]]
        + [f"/dev/dri/{g.card_name}" for g in fake.gpus[4:]]
    )
    assert devices == expected
    for name in VISIBLE_DEVICE_VARS:
        assert f"--env={name}=0,1,2,3" in args
    assert not any("NOT_HIP_VISIBLE_DEVICES" in a for a in args)
    assert "gpu-isolation env -> devices" in err


def test_gpus_all_is_every_gpu_node_not_the_whole_dri_directory(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args, _err = neutralised_args(tmp_path, fake, monkeypatch, capsys, "--gpus", "all")
    devices = [a for a in args if a.startswith("--device=")]
    assert not any(a.endswith(":/dev/dri") for a in devices)
    assert len(devices) == 1 + 2 * len(fake.gpus)  # kfd + render + card, not the BMC's card0
    assert "--env=HIP_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in args


def test_host_ipc_becomes_a_private_shm_of_the_profiles_size(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args, err = neutralised_args(tmp_path, fake, monkeypatch, capsys)
    assert "--ipc=private" in args and "--ipc=host" not in args
    assert "--shm-size=32g" in args
    assert "ipc host -> private /dev/shm (32g)" in err


def test_the_reference_ptrace_and_unconfined_seccomp_are_dropped_unless_the_policy_allows(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args, err = neutralised_args(tmp_path, fake, monkeypatch, capsys)
    assert "--cap-add=SYS_PTRACE" not in args
    assert "--security-opt=seccomp=unconfined" not in args
    assert "cap-add SYS_PTRACE dropped" in err
    policy = tmp_path / "etc" / "policy.toml"
    policy.parent.mkdir()
    policy.write_text('cap-add = ["SYS_PTRACE"]\nsecurity-opt = ["seccomp=unconfined"]\n')
    args, err = neutralised_args(
        tmp_path, fake, monkeypatch, capsys, env={"ROCMENV_POLICY": str(policy)}
    )
    assert "--cap-add=SYS_PTRACE" in args and "--security-opt=seccomp=unconfined" in args
    assert f"policy {policy}" in err


def test_a_policy_file_inside_the_checkout_or_with_unknown_keys_is_refused(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = write_checkout(tmp_path / "fork", {})
    (root / "policy.toml").write_text('cap-add = ["ALL"]\n')
    env = hostile_env(fake, ROCMENV_POLICY=str(root / "policy.toml"))
    code, _out, err = cli(monkeypatch, capsys, root, env, "options")
    assert code == 2 and "inside the checkout" in err
    outside = tmp_path / "policy.toml"
    outside.write_text('cap_add = ["ALL"]\n')
    env = hostile_env(fake, ROCMENV_POLICY=str(outside))
    code, _out, err = cli(monkeypatch, capsys, root, env, "options")
    assert code == 2 and "unknown key 'cap_add'" in err and "did you mean 'cap-add'" in err


# -- the file level: lockfile, mirrors, [host], profile names ---------------------------------


def test_a_lockfile_outside_the_project_is_refused_only_when_untrusted(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = write_checkout(tmp_path / "fork", {}, top=FILE_ATTACKS["lockfile-outside"])
    code, _out, err = cli(monkeypatch, capsys, root, hostile_env(fake), "options")
    assert code == 2 and "points outside the project" in err
    code, _out, err = cli(monkeypatch, capsys, root, fake.env(), "options")
    assert code == 0, err


def test_mirrors_insecure_registries_and_host_roots_of_the_checkout_are_ignored(
    tmp_path: Path,
) -> None:
    top = {**FILE_ATTACKS["mirrors"], **FILE_ATTACKS["host-roots"]}
    root = write_checkout(tmp_path / "fork", {}, top=top)
    ctx = Context(env={"ROCMENV_UNTRUSTED": "1"}, cwd=root)
    config = settings_for(ctx)
    assert config.registry.mirrors == () and config.registry.insecure == ()
    assert config.host.dev_root == Path("/dev") and config.host.sysfs_root == Path("/sys")
    assert not config.project.trusted
    assert any("[registry] and [host]" in note for note in config.notes)
    # trusted input still counts
    env = {"ROCMENV_UNTRUSTED": "1", "ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000"}
    config = settings_for(Context(env=env, cwd=root))
    assert config.registry.mirrors == (("docker.io", ("127.0.0.1:5000",)),)
    # trusted mode reads them as before
    config = settings_for(Context(env={}, cwd=root))
    assert config.registry.mirrors == (("docker.io", ("127.0.0.1:9",)),)


def test_the_notice_says_the_checkouts_registry_settings_were_ignored(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = write_checkout(tmp_path / "fork", {}, top=FILE_ATTACKS["mirrors"])
    code, _out, err = cli(monkeypatch, capsys, root, hostile_env(fake), "options")
    assert code == 0, err
    notice = [line for line in err.splitlines() if "untrusted mode" in line]
    assert len(notice) == 1 and "[registry]" in notice[0]


def test_a_lock_entry_served_by_an_untrusted_registry_is_refused(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The lock's registry is information only: the run pulls the canonical reference, and the
    # checkout's own `pull-from-mirror` (like all of its [registry]) is ignored when untrusted.
    top = {"registry": {"mirrors": {"docker.io": ["evil.example:5000"]}, "pull-from-mirror": True}}
    root = write_checkout(tmp_path / "fork", {}, top=top, lock_registry="evil.example:5000")
    env = hostile_env(fake, DOCKER_HOST="unix:///nonexistent/docker.sock")
    code, _out, err = cli(monkeypatch, capsys, root, env, "run", "--", "id")
    assert code == 125 and "evil.example" not in err.split("untrusted mode")[-1]
    env["ROCMENV_MIRRORS"] = "docker.io=127.0.0.1:5000"
    code, out, err = cli(monkeypatch, capsys, root, env, "options", "--gpus", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["image"].startswith("rocm/sgl-dev@sha256:")


@pytest.mark.parametrize("where", ["rocmenv.toml", "pyproject.toml"])
def test_a_profile_name_that_injects_yaml_is_refused(
    where: str,
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = write_checkout(tmp_path / "fork", {}, name=INJECTING_NAME, where=where)  # type: ignore[arg-type]
    for env, flags in ((hostile_env(fake), ("--untrusted",)), (fake.env(), ())):
        code, out, err = cli(
            monkeypatch, capsys, root, env, "options", "--format", "compose", *flags
        )
        assert code == 2 and out == ""
        assert "is not a name" in err and "[A-Za-z0-9]" in err


def test_compose_output_quotes_every_name_so_nothing_injects_keys(tmp_path: Path) -> None:
    hostile = 'x"\nprivileged: true\n"y'
    profile = replace(
        BUILTIN_PROFILES["cpu"],
        name="p",
        labels=((hostile, hostile), ("on", "yes"), ("a: b", "c")),
        env=(("A", hostile),),
    )
    facts = HostFacts(env={}, cwd=tmp_path, checkout=tmp_path, inventory=None, check_host=False)
    spec = build_runspec(profile, Overrides(), facts, image="IMAGE")
    for service in (None, hostile, "on"):
        doc = yaml.safe_load(render_compose(spec, service=service))
        assert list(doc) == ["services"]
        (svc,) = doc["services"].values()
        assert list(doc["services"]) == [service or "p"]
        assert "privileged" not in svc
        assert svc["labels"] == {hostile: hostile, "on": "yes", "a: b": "c"}
        assert f"A={hostile}" in svc["environment"]


def test_options_refuses_a_service_name_that_is_not_a_name(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = write_checkout(tmp_path / "fork", {})
    code, out, err = cli(
        monkeypatch, capsys, root, fake.env(), "options", "--format", "compose", "--service",
        "a\nprivileged: true",
    )  # fmt: skip
    assert code == 2 and out == "" and "--service" in err


# -- trusted input: a config outside the checkout, the CLI ------------------------------------


def test_a_config_outside_the_checkout_is_trusted_for_pass_env_and_images(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = write_checkout(tmp_path / "fork", {"cap-add": ["ALL"]})  # the fork's: not read
    base = tmp_path / "base"
    write_checkout(
        base, {"image": "registry.example/team/img", "pass-env": ["WANDB_API_KEY"]}, name="ci"
    )
    env = hostile_env(fake, ROCMENV_CONFIG=str(base / "rocmenv.toml"))
    code, out, err = cli(monkeypatch, capsys, root, env, "options", "--gpus", "0")
    assert code == 0, err
    assert "--env=WANDB_API_KEY" in shlex.split(out)
    assert "--cap-add=ALL" not in out
    # the same file named from inside the checkout is the checkout's
    (root / "ci.toml").write_text((base / "rocmenv.toml").read_text())
    env["ROCMENV_CONFIG"] = str(root / "ci.toml")
    code, out, err = cli(monkeypatch, capsys, root, env, "options", "--gpus", "0")
    assert code == 2 and "registry.example/team/img" in err


# -- mounts --------------------------------------------------------------------------------------


def guard_facts(tmp_path: Path, env: Mapping[str, str] | None = None) -> tuple[HostFacts, Path]:
    checkout = tmp_path / "work" / "repo" / "repo"
    (checkout / ".git").mkdir(parents=True, exist_ok=True)
    facts = HostFacts(
        env={"ROCMENV_UNTRUSTED": "1", **(env or {})},
        cwd=checkout,
        checkout=checkout,
        inventory=None,
        path_exists=os.path.exists,
        check_host=True,
        realpath=os.path.realpath,
    )
    return facts, checkout


def spec_with_mount(tmp_path: Path, source: str, **env: str):
    facts, checkout = guard_facts(tmp_path, env)
    profile = replace(
        BUILTIN_PROFILES["cpu"], name="fork", source=str(checkout / "rocmenv.toml"),
        mounts=(Mount(source=source, target="/mnt/x"),),
    )  # fmt: skip
    return guarded(profile, Overrides(), facts, image=IMAGE), checkout


def test_the_checkout_is_a_copy_on_write_view_never_a_writable_bind(tmp_path: Path) -> None:
    """Issue 31: the host checkout, ``.git`` included, is never writable from an untrusted
    container; a trusted one binds it writable as before."""
    facts, checkout = guard_facts(tmp_path)
    spec = guarded(BUILTIN_PROFILES["cpu"], Overrides(), facts, image=IMAGE)
    by_target = {m.target: m for m in spec.mounts}
    assert by_target[str(checkout)].kind == "overlay"
    assert by_target[str(checkout)].source == str(checkout)
    assert not [m for m in spec.mounts if m.host_writable]
    assert f"{checkout}/.git" not in by_target  # inside the view, like every other file
    assert "the checkout copy-on-write" in spec.notes[0]
    trusted = guarded(BUILTIN_PROFILES["cpu"], Overrides(), replace(facts, env={}), image=IMAGE)
    (bind,) = [m for m in trusted.mounts if m.target == str(checkout)]
    assert bind.kind == "bind" and bind.host_writable


@pytest.mark.parametrize("cwd", ["/", "/var", "/tmp"])
def test_untrusted_mode_refuses_to_mount_a_system_directory_as_the_checkout(cwd: str) -> None:
    facts = HostFacts(
        env={"ROCMENV_UNTRUSTED": "1"}, cwd=Path(cwd), checkout=Path(cwd), inventory=None,
        path_exists=os.path.exists, realpath=os.path.realpath,
    )  # fmt: skip
    with pytest.raises(PolicyViolation, match="the checkout"):
        guarded(BUILTIN_PROFILES["cpu"], Overrides(), facts, image=IMAGE)
    guarded(BUILTIN_PROFILES["cpu"], Overrides(), replace(facts, env={}), image=IMAGE)


def test_a_checkout_holding_the_runners_work_directory_is_refused(tmp_path: Path) -> None:
    facts, _ = guard_facts(tmp_path, {"RUNNER_TEMP": str(tmp_path / "work" / "_temp")})
    guarded(BUILTIN_PROFILES["cpu"], Overrides(), facts, image=IMAGE)  # the repo: fine
    above = replace(facts, cwd=tmp_path, checkout=tmp_path)
    with pytest.raises(PolicyViolation, match="the checkout"):
        guarded(BUILTIN_PROFILES["cpu"], Overrides(), above, image=IMAGE)


def test_a_mount_inside_the_checkout_is_read_only_from_the_command_line_only(
    tmp_path: Path,
) -> None:
    """A profile's (the fork's) mount of its own files is not declared by the trusted side
    (and a parallel test could swap the directory for a link before the engine mounts it);
    the workflow's ``-v`` of it is mounted read-only."""
    facts, checkout = guard_facts(tmp_path)
    (checkout / "data").mkdir()
    with pytest.raises(PolicyViolation, match="declared"):
        spec_with_mount(tmp_path, str(checkout / "data"))
    spec = guarded(BUILTIN_PROFILES["cpu"], Overrides(mounts=(f"{checkout}/data:/mnt/x",)),
                   facts, image=IMAGE)  # fmt: skip
    assert next(m for m in spec.mounts if m.target == "/mnt/x").readonly


def test_a_symlink_in_the_checkout_to_a_host_directory_is_refused(tmp_path: Path) -> None:
    _facts, checkout = guard_facts(tmp_path)
    (checkout / "innocent").symlink_to("/etc")
    with pytest.raises(PolicyViolation, match="nothing of /etc"):
        spec_with_mount(tmp_path, str(checkout / "innocent"))


def test_a_socket_or_a_directory_holding_one_is_refused(tmp_path: Path) -> None:
    import socket

    from rocmenv.container.hostpaths import find_socket

    facts, _checkout = guard_facts(tmp_path)
    facts = replace(facts, find_socket=find_socket)
    agent_dir = tmp_path / "ssh-agent" / "deep"
    agent_dir.mkdir(parents=True)
    (agent_dir.parent / "notes.txt").write_text("x")
    path = agent_dir / "agent"  # not *.sock: found by what it is
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        for source in (path, tmp_path / "ssh-agent"):
            profile = replace(
                BUILTIN_PROFILES["cpu"], name="fork", source="x",
                mounts=(Mount(source=str(source), target="/mnt/x"),),
            )  # fmt: skip
            with pytest.raises(PolicyViolation, match="no sockets"):
                guarded(profile, Overrides(), facts, image=IMAGE)
    assert find_socket(str(tmp_path / "ssh-agent")) == str(path)
    assert find_socket(str(tmp_path / "ssh-agent"), limit=1) is None  # the scan is bounded
    path.unlink()
    assert find_socket(str(tmp_path / "ssh-agent")) is None


def test_directories_containing_the_checkout_or_the_engine_socket_are_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(PolicyViolation, match="containing the checkout"):
        spec_with_mount(tmp_path, str(tmp_path / "work"))
    sock_dir = tmp_path / "engine"
    sock_dir.mkdir()
    with pytest.raises(PolicyViolation, match="engine's socket"):
        spec_with_mount(tmp_path, str(sock_dir), DOCKER_HOST=f"unix://{sock_dir}/docker.sock")


def test_the_runners_work_directory_outside_the_checkout_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "work" / "other-repo"
    other.mkdir(parents=True)
    runner = {"RUNNER_WORKSPACE": str(tmp_path / "work" / "repo")}
    with pytest.raises(PolicyViolation, match="runner's work directory"):
        spec_with_mount(tmp_path, str(other), **runner)
    temp = tmp_path / "work" / "_temp"
    temp.mkdir()
    with pytest.raises(PolicyViolation, match="runner's work directory"):
        spec_with_mount(tmp_path, str(temp), RUNNER_TEMP=str(temp))
    with pytest.raises(PolicyViolation, match="declared"):  # without them: undeclared still
        spec_with_mount(tmp_path, str(other))


@pytest.mark.parametrize("source", ["/", "/proc", "/sys/kernel", "/dev", "/etc", "/root",
                                    "/home", "/run", "/var/run/docker.sock", "/var", "/tmp"])  # fmt: skip
def test_system_paths_are_refused(source: str, tmp_path: Path) -> None:
    with pytest.raises(PolicyViolation, match="mounts = "):
        spec_with_mount(tmp_path, source)


def test_the_policy_can_restrict_data_mounts_to_named_roots(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    facts, _checkout = guard_facts(tmp_path)
    profile = replace(
        BUILTIN_PROFILES["cpu"], name="fork", source="x",
        mounts=(Mount(source=str(data), target="/mnt/x"),),
    )  # fmt: skip
    strict = Guard(policy=Policy(mount_sources=("/data",)), mount_sources=("/data",))
    with pytest.raises(PolicyViolation, match=r"only under the sources .* declared \(/data"):
        guarded(profile, Overrides(), facts, image=IMAGE, guard=strict)
    guarded(profile, Overrides(), facts, image=IMAGE, guard=Guard(mount_sources=(str(data),)))


def _deep_socket_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, object]:
    """A directory whose socket lies past the denylist's scan limit (10,000 entries)."""
    import socket

    from rocmenv.container.hostpaths import SOCKET_SCAN_LIMIT

    deep = tmp_path / "deep"
    (deep / "x" / "y").mkdir(parents=True)
    for i in range(SOCKET_SCAN_LIMIT + 1):
        (deep / f"f{i}").touch()
    monkeypatch.chdir(deep / "x" / "y")  # AF_UNIX paths are short: bind relative
    sock = socket.socket(socket.AF_UNIX)
    sock.bind("agent")
    return deep, sock


def test_data_mounts_the_trusted_side_did_not_declare_are_refused(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 22: the denylist's gaps — the runner's credentials file, ``~/.docker`` when
    ``HOME`` is not under /home, /opt, /var/backups, a socket past the scan limit — were
    read-only mounts whose 0600 files container root reads. Now a checkout's profile may
    mount only under the sources the trusted side declared."""
    runner = tmp_path / "actions-runner"
    (runner / "_work" / "repo" / "repo").mkdir(parents=True)
    (runner / ".credentials").write_text('{"token": "runner-secret"}')
    home = tmp_path / "var-lib-ci"
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text('{"auths": {}}')
    deep, sock = _deep_socket_dir(tmp_path, monkeypatch)
    env = hostile_env(fake, HOME=str(home), RUNNER_WORKSPACE=str(runner / "_work" / "repo"))
    try:
        for source in (runner / ".credentials", home / ".docker", "/opt", "/var/backups", deep):
            root = write_checkout(tmp_path / "fork", {"mounts": [f"{source}:/mnt/x"]})
            code, out, err = cli(monkeypatch, capsys, root, env, "options", "--format", "docker")
            assert code == 2, (source, out)
            assert f"mounts = '{source}:/mnt/x'" in err, err
            assert "untrusted mode" in err and "Traceback" not in err
    finally:
        sock.close()  # type: ignore[attr-defined]


def test_the_denylist_behind_the_allowlist_covers_credentials_wherever_home_is(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The second line: even the workflow's own ``-v`` (not held to the allowlist) cannot
    mount the runner's credentials, ``~/.docker`` of a HOME outside /home, or
    /var/backups."""
    runner = tmp_path / "actions-runner"
    (runner / "_work" / "repo").mkdir(parents=True)
    (runner / ".credentials").write_text("x")
    home = tmp_path / "ci-home"
    (home / ".docker").mkdir(parents=True)
    config = tmp_path / "docker-config"
    config.mkdir()
    env = hostile_env(fake, HOME=str(home), RUNNER_WORKSPACE=str(runner / "_work" / "repo"),
                      DOCKER_CONFIG=str(config))  # fmt: skip
    root = write_checkout(tmp_path / "fork", {})
    for source, rule in ((runner / ".credentials", "credentials"), (runner, "runner's"),
                         (home / ".docker", "credentials"), (config, "credentials"),
                         (home, "credentials"), ("/var/backups", "nothing of /var/backups")):  # fmt: skip
        code, out, err = cli(monkeypatch, capsys, root, env, "options", "-v", f"{source}:/x")
        assert code == 2, (source, out)
        assert rule in err, err


def test_declared_sources_and_the_command_lines_own_mounts_pass_the_allowlist(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    datasets = tmp_path / "datasets"
    (datasets / "imagenet").mkdir(parents=True)
    other = tmp_path / "other"
    other.mkdir()
    policy = tmp_path / "policy.toml"
    policy.write_text(f'mount-sources = ["{datasets}"]\n')
    root = write_checkout(tmp_path / "fork", {"mounts": [f"{datasets}/imagenet:/data"]})
    env = hostile_env(fake, ROCMENV_POLICY=str(policy))
    code, out, err = cli(monkeypatch, capsys, root, env, "options", "--format", "docker")
    assert code == 0, err
    assert f"source={datasets}/imagenet,target=/data,readonly" in out
    # a link under a declared source that leads elsewhere is judged where it leads
    (datasets / "escape").symlink_to(other)
    write_checkout(root, {"mounts": [f"{datasets}/escape:/data"]})
    code, out, err = cli(monkeypatch, capsys, root, env, "options", "--format", "docker")
    assert code == 2 and "declared" in err
    # -v is the workflow's (trusted) command line: not held to the allowlist, still to the
    # denylist
    write_checkout(root, {})
    code, out, err = cli(monkeypatch, capsys, root, env, "options", "-v", f"{other}:/o")
    assert code == 0, err
    assert f"source={other},target=/o,readonly" in out
    code, out, err = cli(monkeypatch, capsys, root, env, "options", "-v", "/etc:/o")
    assert code == 2 and "nothing of /etc" in err


def test_without_a_policy_the_declared_sources_are_the_trusted_configs_profile_mounts(
    tmp_path: Path,
) -> None:
    from rocmenv.container.guard import guard_for
    from rocmenv.settings.resolve import Flags

    root = write_checkout(tmp_path / "fork", {"mounts": ["/srv/fork:/x"]})
    ctx = Context(env={"ROCMENV_UNTRUSTED": "1", "HOME": str(tmp_path)}, cwd=root)
    guard = guard_for(settings_for(ctx, Flags()), root)
    assert guard.mount_sources == ("/data/miles_ci",)  # the built-in profiles': not the fork's
    trusted = tmp_path / "trusted.toml"
    trusted.write_text('[profiles.ci]\nextends = "rocm"\nmounts = ["/srv/models:/models"]\n')
    ctx = Context(env={"ROCMENV_UNTRUSTED": "1", "HOME": str(tmp_path)}, cwd=root,
                  config_path=trusted)  # fmt: skip
    guard = guard_for(settings_for(ctx, Flags()), root)
    assert guard.mount_sources == ("/data/miles_ci", "/srv/models")


# -- groups, the host's GIDs -------------------------------------------------------------------


def test_root_equivalent_groups_are_refused_even_when_the_policy_lists_them(
    tmp_path: Path,
) -> None:
    facts, _ = guard_facts(tmp_path)
    facts = replace(facts, group_gid={"video": 44, "docker": 999}.get)
    lax = Guard(policy=Policy(group_add=("video", "docker", "0", "disk")))
    for group in ("docker", "999", "0", "disk"):
        profile = replace(BUILTIN_PROFILES["cpu"], name="f", source="x", group_add=(group,))
        with pytest.raises(PolicyViolation, match="root-equivalent"):
            guarded(profile, Overrides(), facts, image=IMAGE, guard=lax)


def test_video_and_render_pass_by_name_or_by_this_hosts_gid_and_nothing_else(
    tmp_path: Path,
) -> None:
    facts, _ = guard_facts(tmp_path)
    facts = replace(facts, group_gid={"video": 44, "render": 109, "docker": 999}.get)
    for groups, ok in ((("video", "render"), True), (("44", "109"), True), (("999",), False),
                       (("0",), False), (("disk",), False), (("45",), False)):  # fmt: skip
        profile = replace(BUILTIN_PROFILES["cpu"], name="f", source="x", group_add=groups)
        if ok:
            spec = guarded(profile, Overrides(), facts, image=IMAGE)
            assert set(spec.group_add) == {"44", "109"}
        else:
            with pytest.raises(PolicyViolation, match="group-add"):
                guarded(profile, Overrides(), facts, image=IMAGE)


# -- trusted mode too: the selection's renumbered variables win --------------------------------


def test_passed_visible_devices_are_renumbered_for_a_subset_in_trusted_mode(
    tmp_path: Path, fake: FakeHost
) -> None:
    from rocmenv.container.gpu import discover

    facts = HostFacts(
        env={"HIP_VISIBLE_DEVICES": "4,5,6,7", "ROCR_VISIBLE_DEVICES": "4,5,6,7"},
        cwd=tmp_path,
        checkout=None,
        inventory=discover(fake.sysfs_root, fake.dev_root),
        path_exists=os.path.exists,
    )
    profile = replace(BUILTIN_PROFILES["rocm"], pass_env=("HIP_VISIBLE_DEVICES",),
                      env=(("ROCR_VISIBLE_DEVICES", "4,5,6,7"),))  # fmt: skip
    spec = guarded(profile, Overrides(gpus="4-7"), facts, image="img")
    assert spec.env_values["HIP_VISIBLE_DEVICES"] == "0,1,2,3"
    assert spec.env_values["ROCR_VISIBLE_DEVICES"] == "0,1,2,3"
    assert "CUDA_VISIBLE_DEVICES" not in spec.env_values  # not asked for: not added
    # an explicit -e NAME=VALUE is the user's choice among the selected GPUs
    spec = guarded(
        profile, Overrides(gpus="4-7", env=("HIP_VISIBLE_DEVICES=1",)), facts, image="img"
    )
    assert spec.env_values["HIP_VISIBLE_DEVICES"] == "1"
    # all GPUs: the host's numbering is the container's, the passed value stays
    spec = guarded(profile, Overrides(gpus="all"), facts, image="img")
    assert spec.env_values["HIP_VISIBLE_DEVICES"] == "4,5,6,7"


def test_policy_json_of_options_carries_no_secret(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = write_checkout(tmp_path / "fork", NEUTRALISED["pass-env"])
    code, out, err = cli(monkeypatch, capsys, root, hostile_env(fake), "options", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert not any(name in " ".join(doc["args"]) for name in SECRETS)


def test_config_error_for_a_bad_profile_name_is_a_config_error(tmp_path: Path) -> None:
    root = write_checkout(tmp_path / "fork", {}, name="a b")
    with pytest.raises(ConfigError, match="is not a name"):
        settings_for(Context(env={}, cwd=root))


def test_a_profile_that_declares_itself_untrusted_gets_no_mirror_from_its_own_file(
    tmp_path: Path,
    fake: FakeHost,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Untrusted only by the profile's own `untrusted = true`: that switches untrusted mode on
    as the flag and the variable do, so the file's [registry] (mirrors, pull-from-mirror) is
    ignored and the lock entry's host is information only: the canonical reference is used."""
    top = {"registry": {**FILE_ATTACKS["mirrors"]["registry"], "pull-from-mirror": True}}
    root = write_checkout(
        tmp_path / "fork", {"untrusted": True}, top=top, lock_registry="127.0.0.1:9",
    )  # fmt: skip
    env = {**fake.env(), "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    code, _out, err = cli(monkeypatch, capsys, root, env, "run", "--", "id")
    assert code == 125 and "127.0.0.1:9" not in err  # got as far as the (absent) engine
    env["ROCMENV_MIRRORS"] = "docker.io=127.0.0.1:9"  # the same host from trusted input
    code, out, err = cli(monkeypatch, capsys, root, env, "options", "--json", "--gpus", "1")
    assert code == 0, err
    assert json.loads(out)["image"].startswith("rocm/sgl-dev@")  # the file's pull-from-mirror
    assert "ignored from the checkout's rocmenv.toml: [registry]" in err
    assert "HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES=0" in err


def test_the_policys_images_are_the_allowed_ones_over_the_trusted_configs(tmp_path: Path) -> None:
    from rocmenv.container.guard import guard_for
    from rocmenv.settings.resolve import Flags

    root = write_checkout(tmp_path / "fork", {})
    trusted = tmp_path / "trusted.toml"
    trusted.write_text('[profiles.ci]\nextends = "rocm"\nimage = "ghcr.io/org/ci:1"\n')
    env = {"ROCMENV_UNTRUSTED": "1", "HOME": str(tmp_path)}
    ctx = Context(env=env, cwd=root, config_path=trusted)
    assert guard_for(settings_for(ctx, Flags()), root).images == ("ghcr.io/org/ci",)
    policy = tmp_path / "policy.toml"
    policy.write_text('images = ["quay.io/org/only"]\n')
    ctx = Context(env={**env, "ROCMENV_POLICY": str(policy)}, cwd=root, config_path=trusted)
    assert guard_for(settings_for(ctx, Flags()), root).images == ("quay.io/org/only",)


def test_the_guard_of_a_run_trusts_the_config_outside_the_checkout_and_its_mirrors(
    tmp_path: Path,
) -> None:
    from rocmenv.container.guard import guard_for
    from rocmenv.settings.resolve import Flags

    root = write_checkout(tmp_path / "fork", {})
    env = {"ROCMENV_UNTRUSTED": "1", "HOME": str(tmp_path),
           "ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000,docker.io=m2.example"}  # fmt: skip
    guard = guard_for(settings_for(Context(env=env, cwd=root), Flags()), root)
    assert guard.mirrors == (("docker.io", "127.0.0.1:5000"), ("docker.io", "m2.example"))
    assert not guard.config_trusted and guard.trusted_sources == ("built-in",)
    trusted = tmp_path / "trusted.toml"
    trusted.write_text('[profiles.ci]\nextends = "rocm"\n')
    guard = guard_for(settings_for(Context(env=env, cwd=root, config_path=trusted), Flags()), root)
    assert guard.config_trusted and str(trusted) in guard.trusted_sources


def test_the_guard_of_a_run_lets_the_trusted_configs_optional_sources_be_created(
    tmp_path: Path,
) -> None:
    """An optional mount a trusted profile declares may have its absent source created by the
    engine; the built-in profiles' optional sources too; an untrusted file's may not."""
    from rocmenv.container.guard import guard_for
    from rocmenv.settings.resolve import Flags

    root = write_checkout(tmp_path / "fork", {})
    trusted = tmp_path / "trusted.toml"
    trusted.write_text(
        '[profiles.ci]\nextends = "rocm"\n'
        'mounts = [{ source = "/srv/ci-cache", target = "/cache", optional = true }]\n'
    )
    ctx = Context(env={"ROCMENV_UNTRUSTED": "1", "HOME": str(tmp_path)}, cwd=root,
                  config_path=trusted)  # fmt: skip
    guard = guard_for(settings_for(ctx, Flags()), root)
    assert guard.optional_sources is not None
    assert "/srv/ci-cache" in guard.optional_sources
    assert "/data/miles_ci" in guard.optional_sources
