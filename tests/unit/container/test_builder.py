"""RunSpec: profile + overrides + host → container, and its docker/gha/compose renderings."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rocmenv.container.builder import build_runspec
from rocmenv.container.gpu import discover
from rocmenv.container.guard import Guard
from rocmenv.container.labels import LABEL_OWNER_PID, LABEL_PROFILE, LABEL_SESSION, Identity
from rocmenv.container.plan import build_spec
from rocmenv.container.render import render_compose, render_docker, render_gha
from rocmenv.container.runspec import (
    Device,
    HostFacts,
    LauncherMount,
    Overrides,
    RunSpec,
    parse_device,
)
from rocmenv.context import Context
from rocmenv.errors import ConfigError, UsageError
from rocmenv.settings.profiles import BUILTIN_PROFILES, Mount, Profile, Ulimit
from rocmenv.settings.project import Project
from rocmenv.settings.resolve import Flags, settings_for
from tests.support.fakegpu import FakeHost, build_fake_host

ROCM = BUILTIN_PROFILES["rocm"]
CPU = BUILTIN_PROFILES["cpu"]
GIDS = {"video": 44, "render": 109}


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    return build_fake_host(tmp_path / "host", char_devices=False)


def facts(
    host: FakeHost | None,
    tmp_path: Path,
    *,
    env: dict[str, str] | None = None,
    existing: set[str] | None = None,
    check_host: bool = True,
    **kw: object,
) -> HostFacts:
    checkout = tmp_path / "repo"
    cwd = checkout / "sub"
    present = {str(checkout)} | (existing or set())

    def exists(path: str) -> bool:
        if host is not None and path.startswith(str(host.root)):
            return Path(path).exists()
        return path in present

    return HostFacts(
        env=env or {},
        cwd=cwd,
        checkout=checkout,
        inventory=discover(host.sysfs_root, host.dev_root) if host else None,
        group_gid=GIDS.get,
        path_exists=exists,
        check_host=check_host,
        identity=Identity(session="s3ss10n", owner_pid=4242, owner_host="box", owner_start=None),
        **kw,  # type: ignore[arg-type]
    )


def spec_for(
    profile: Profile,
    host: FakeHost | None,
    tmp_path: Path,
    ov: Overrides | None = None,
    launcher: LauncherMount | None = None,
    image: str = "img:1",
    untrusted_flag: bool = False,
    **kw: object,
) -> RunSpec:
    """The planner's spec; untrusted as the settings resolver decides it (the flag, the
    profile's ``untrusted`` or ``ROCMENV_UNTRUSTED`` in ``env``)."""
    host_facts = facts(host, tmp_path, **kw)  # type: ignore[arg-type]
    project = Project(
        path=None,
        root=tmp_path,
        profiles=tuple({**BUILTIN_PROFILES, profile.name: profile}.items()),
    )
    settings = settings_for(
        Context(env=host_facts.env, cwd=tmp_path),
        Flags(profile=profile.name, untrusted=untrusted_flag),
        project=project,
    )
    guard = Guard() if settings.untrusted else None
    return build_spec(
        profile, ov or Overrides(), host_facts, image=image, guard=guard, launcher=launcher
    )


# -- GPUs ------------------------------------------------------------------------------------


def test_four_of_eight_gpus_pass_exactly_their_render_and_card_nodes(
    host: FakeHost, tmp_path: Path
) -> None:
    spec = spec_for(ROCM, host, tmp_path, Overrides(gpus="4-7"))
    dev = host.dev_root
    expected = [Device(host=f"{dev}/kfd", container="/dev/kfd")]
    for g in host.gpus[4:]:
        expected.append(
            Device(host=f"{dev}/dri/{g.render_name}", container=f"/dev/dri/{g.render_name}")
        )
        expected.append(
            Device(host=f"{dev}/dri/{g.card_name}", container=f"/dev/dri/{g.card_name}")
        )
    assert list(spec.devices) == expected
    assert spec.gpu_selection.indices == (4, 5, 6, 7)


def test_all_gpus_pass_kfd_and_the_whole_dri_directory(host: FakeHost, tmp_path: Path) -> None:
    spec = spec_for(ROCM, host, tmp_path)
    assert [d.container for d in spec.devices] == ["/dev/kfd", "/dev/dri"]
    assert spec.devices[1].host == f"{host.dev_root}/dri"


def test_device_isolation_numbers_the_visible_gpus_from_zero(
    host: FakeHost, tmp_path: Path
) -> None:
    profile = replace(ROCM, gpu_env=("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"))
    spec = spec_for(profile, host, tmp_path, Overrides(gpus="5,7"))
    assert spec.env_values["HIP_VISIBLE_DEVICES"] == "0,1"
    assert spec.env_values["ROCR_VISIBLE_DEVICES"] == "0,1"


def test_env_isolation_passes_every_node_and_the_host_indices(
    host: FakeHost, tmp_path: Path
) -> None:
    profile = replace(ROCM, gpu_isolation="env")
    spec = spec_for(
        profile, host, tmp_path, Overrides(gpus="5,7"), env={"HIP_VISIBLE_DEVICES": "0"}
    )
    assert [d.container for d in spec.devices] == ["/dev/kfd", "/dev/dri"]
    assert spec.env_values["HIP_VISIBLE_DEVICES"] == "5,7"  # the selection beats pass-env


def test_no_kfd_on_the_host_is_an_error_unless_gpus_none(tmp_path: Path) -> None:
    host = build_fake_host(tmp_path / "h", char_devices=False, with_kfd=False)
    with pytest.raises(UsageError) as info:
        spec_for(ROCM, host, tmp_path)
    assert "kfd does not exist" in str(info.value)
    assert "--gpus none" in str(info.value.hint)
    spec = spec_for(ROCM, host, tmp_path, Overrides(gpus="none"))
    assert spec.devices == ()


def test_cpu_profile_has_no_gpu_devices_groups_ulimits_or_security_options(
    host: FakeHost, tmp_path: Path
) -> None:
    spec = spec_for(CPU, host, tmp_path)
    assert not (spec.devices or spec.group_add or spec.ulimits or spec.security_opt or spec.cap_add)


def test_a_missing_extra_device_is_an_error(host: FakeHost, tmp_path: Path) -> None:
    profile = replace(ROCM, devices=("/dev/infiniband/uverbs0",))
    with pytest.raises(UsageError, match="device /dev/infiniband/uverbs0"):
        spec_for(profile, host, tmp_path)


def test_device_strings_parse_with_container_path_and_permissions() -> None:
    assert parse_device("/dev/a", "x") == Device(host="/dev/a", container="/dev/a")
    assert parse_device("/dev/a:/dev/b:r", "x") == Device(
        host="/dev/a", container="/dev/b", permissions="r"
    )
    for bad in ("dev/a", "/dev/a:/dev/b:rwx", "/dev/a::r"):
        with pytest.raises(ConfigError):
            parse_device(bad, "x")


def test_gpu_subset_needs_the_inventory_when_rendering_for_another_host(tmp_path: Path) -> None:
    spec = spec_for(ROCM, None, tmp_path, check_host=False)
    assert [d.render() for d in spec.devices] == ["/dev/kfd", "/dev/dri"]
    with pytest.raises(UsageError, match="names particular GPUs"):
        spec_for(ROCM, None, tmp_path, Overrides(gpus="0,1"), check_host=False)


# -- groups ----------------------------------------------------------------------------------


def test_groups_known_on_the_host_become_host_gids_others_stay_names(
    host: FakeHost, tmp_path: Path
) -> None:
    profile = replace(ROCM, group_add=("video", "render", "kvm", "1234", "video"))
    spec = spec_for(profile, host, tmp_path)
    assert spec.group_add == ("44", "109", "kvm", "1234")


# -- mounts ----------------------------------------------------------------------------------


def test_checkout_is_mounted_at_its_path_and_the_workdir_is_the_cwd(tmp_path: Path) -> None:
    spec = spec_for(CPU, None, tmp_path, Overrides(gpus="none"))
    checkout = str(tmp_path / "repo")
    assert spec.mounts[0].source == spec.mounts[0].target == checkout
    assert spec.checkout == checkout
    assert spec.workdir == str(tmp_path / "repo" / "sub")


def test_without_the_checkout_the_image_workdir_stays(tmp_path: Path) -> None:
    spec = spec_for(replace(CPU, mount_checkout=False), None, tmp_path)
    assert spec.workdir is None and spec.checkout is None


def test_a_missing_mount_source_is_an_error_naming_it(tmp_path: Path) -> None:
    profile = replace(CPU, mounts=(Mount(source="/data/ci", target="/data/ci"),))
    with pytest.raises(UsageError) as info:
        spec_for(profile, None, tmp_path)
    assert "/data/ci" in str(info.value) and "optional" in str(info.value.hint)


def test_a_missing_optional_mount_is_skipped_with_one_note(tmp_path: Path) -> None:
    spec = spec_for(CPU, None, tmp_path)
    assert [m.target for m in spec.mounts] == [str(tmp_path / "repo")]
    assert len([n for n in spec.notes if "optional mounts skipped" in n]) == 1
    assert "/data/miles_ci/models" in spec.notes[0]


def test_cli_volume_replaces_a_profile_mount_with_the_same_target(tmp_path: Path) -> None:
    existing = {"/data/miles_ci", "/elsewhere"}
    spec = spec_for(
        CPU, None, tmp_path, Overrides(mounts=("/elsewhere:/data/miles_ci:ro",)), existing=existing
    )
    mount = next(m for m in spec.mounts if m.target == "/data/miles_ci")
    assert mount.source == "/elsewhere" and mount.readonly


def test_two_mounts_on_one_target_are_refused(tmp_path: Path) -> None:
    profile = replace(
        CPU, mounts=(Mount(source="/a", target="/x"), Mount(source="/b", target="/x"))
    )
    with pytest.raises(UsageError, match="two mounts target /x"):
        spec_for(profile, None, tmp_path, existing={"/a", "/b"})


@pytest.mark.parametrize("text", ["/a", "/a:rel", "/a:/b:rx", ":/b", "/a:/b:ro:x"])
def test_malformed_cli_volumes_are_refused(text: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"-v"):
        spec_for(CPU, None, tmp_path, Overrides(mounts=(text,)), existing={"/a"})


# -- environment -----------------------------------------------------------------------------


def test_only_declared_variables_pass(tmp_path: Path) -> None:
    profile = replace(
        CPU,
        env=(("HF_HUB_OFFLINE", "1"),),
        pass_env=("HIP_VISIBLE_DEVICES", "NOT_SET_ON_HOST"),
        secret_env=("WANDB_API_KEY",),
    )
    host_env = {
        "HIP_VISIBLE_DEVICES": "0,1",
        "WANDB_API_KEY": "wandb-secret-value",
        "AWS_SECRET_ACCESS_KEY": "nope",
        "HOME": "/root",
    }
    spec = spec_for(profile, None, tmp_path, env=host_env)
    assert spec.env_values == {
        "HF_HUB_OFFLINE": "1",
        "HIP_VISIBLE_DEVICES": "0,1",
        "WANDB_API_KEY": "wandb-secret-value",
    }


def test_proxy_variables_are_dropped_unless_kept(tmp_path: Path) -> None:
    profile = replace(
        CPU, pass_env=("HTTPS_PROXY", "no_proxy"), env=(("http_proxy", "http://p:3128"),)
    )
    env = {"HTTPS_PROXY": "http://p:3128", "no_proxy": "localhost"}
    assert spec_for(profile, None, tmp_path, env=env).env_values == {}
    kept = spec_for(replace(profile, keep_proxy_env=True), None, tmp_path, env=env).env_values
    assert kept == {
        "HTTPS_PROXY": "http://p:3128",
        "no_proxy": "localhost",
        "http_proxy": "http://p:3128",
    }


def test_cli_env_sets_values_or_takes_them_from_the_host(tmp_path: Path) -> None:
    spec = spec_for(CPU, None, tmp_path, Overrides(env=("A=1", "B", "C=")), env={"B": "from-host"})
    assert spec.env_values == {"A": "1", "B": "from-host", "C": ""}
    with pytest.raises(UsageError, match="not an environment variable name"):
        spec_for(CPU, None, tmp_path, Overrides(env=("1A=x",)))


# -- untrusted / privileged ------------------------------------------------------------------


def test_untrusted_mode_passes_no_secrets_and_mounts_data_read_only(tmp_path: Path) -> None:
    profile = replace(
        CPU,
        mounts=(Mount(source="/data/miles_ci/x", target="/data"),),  # declared: built-in
        secret_env=("WANDB_API_KEY",),
        pass_env=("HIP_VISIBLE_DEVICES",),
    )
    env = {"WANDB_API_KEY": "k" * 10, "HIP_VISIBLE_DEVICES": "1"}
    ok: dict[str, Any] = {"existing": {"/data/miles_ci/x"}, "image": "rocm/sgl-dev:v1"}
    for spec in (
        spec_for(profile, None, tmp_path, untrusted_flag=True, env=env, **ok),
        spec_for(replace(profile, untrusted=True), None, tmp_path, env=env, **ok),
        spec_for(profile, None, tmp_path, env={**env, "ROCMENV_UNTRUSTED": "1"}, **ok),
    ):
        assert spec.untrusted
        assert "WANDB_API_KEY" not in spec.env_values
        assert spec.env_values["HIP_VISIBLE_DEVICES"] == "1"
        data = next(m for m in spec.mounts if m.target == "/data")
        checkout = next(m for m in spec.mounts if m.target == spec.checkout)
        assert data.readonly and not checkout.readonly
        assert spec.notes[0].startswith("untrusted mode:")
        assert len([n for n in spec.notes if n.startswith("untrusted mode")]) == 1


def test_untrusted_mode_refuses_privileged(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="refused"):
        spec_for(replace(CPU, privileged=True), None, tmp_path, untrusted_flag=True)


def test_untrusted_mode_refuses_a_secret_given_with_minus_e(tmp_path: Path) -> None:
    profile = replace(CPU, secret_env=("WANDB_API_KEY",))
    with pytest.raises(UsageError, match="passes no secrets"):
        spec_for(profile, None, tmp_path, Overrides(env=("WANDB_API_KEY=x",)), untrusted_flag=True)


def test_privileged_in_a_trusted_profile_is_warned(tmp_path: Path) -> None:
    spec = spec_for(replace(CPU, privileged=True), None, tmp_path)
    assert spec.privileged
    assert any("privileged" in w for w in spec.warnings)


# -- labels ----------------------------------------------------------------------------------


def test_labels_name_session_profile_owner_and_digest(tmp_path: Path) -> None:
    spec = spec_for(
        replace(CPU, labels=(("team", "ml"),)), None, tmp_path, image_digest="sha256:" + "a" * 64
    )
    labels = spec.label_map
    assert labels[LABEL_SESSION] == "s3ss10n"
    assert labels[LABEL_PROFILE] == "cpu"
    assert labels[LABEL_OWNER_PID] == "4242"
    assert labels["rocmenv.owner-host"] == "box"
    assert labels["rocmenv.image-digest"] == "sha256:" + "a" * 64
    assert labels["team"] == "ml"


def test_profile_labels_cannot_use_the_rocmenv_prefix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        spec_for(replace(CPU, labels=(("rocmenv.session", "x"),)), None, tmp_path)


def test_launcher_is_mounted_read_only_and_pythonpath_replaced_once(tmp_path: Path) -> None:
    plain = LauncherMount(host_dir="/cache/l", container_dir="/opt/rocmenv/launcher")
    out = spec_for(CPU, None, tmp_path, Overrides(env=("PYTHONPATH=/x",)), launcher=plain)
    assert out.env_values["PYTHONPATH"] == "/opt/rocmenv/launcher:/x"
    assert [e.name for e in out.env].count("PYTHONPATH") == 1
    launcher = next(m for m in out.mounts if m.target == "/opt/rocmenv/launcher")
    assert launcher.readonly and launcher.source == "/cache/l"
    assert out.tmpfs == ()
    cached = spec_for(
        CPU,
        None,
        tmp_path,
        launcher=replace(plain, pycache_dir="/opt/rocmenv/launcher/__pycache__"),
        image_env={"PYTHONPATH": "/img"},
    )
    assert cached.env_values["PYTHONPATH"] == "/opt/rocmenv/launcher:/img"  # the image's own
    assert cached.tmpfs == (("/opt/rocmenv/launcher/__pycache__", "rw,size=1m"),)
    assert "--tmpfs=/opt/rocmenv/launcher/__pycache__:rw,size=1m" in render_docker(cached)


# -- renderings ------------------------------------------------------------------------------

REFERENCE_OPTIONS = (
    "--device=/dev/kfd --device=/dev/dri --env HIP_VISIBLE_DEVICES --security-opt seccomp=unconfined "
    "--group-add video --group-add render --cap-add=SYS_PTRACE --ipc=host --shm-size=32g "
    "--ulimit memlock=-1 --ulimit stack=67108864 --memory=0 --memory-swap=0 "
    "-v /data/miles_ci:/data/miles_ci -v /data/miles_ci/models:/root/models "
    "-v /data/miles_ci/datasets:/root/datasets -v /data/miles_ci/hf_cache:/root/.cache/huggingface "
    "--privileged --ulimit nofile=65535:65535"
)


def _normalise(argv: list[str]) -> set[tuple[str, str]]:
    """Docker flags as (flag, value) pairs; -v and --mount type=bind compare equal, and so
    do --ulimit N and N:N."""
    out: set[tuple[str, str]] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if "=" in arg and arg.startswith("--"):
            flag, value = arg.split("=", 1)
        elif arg == "--privileged":
            flag, value = arg, ""
        else:
            flag, value = arg, argv[i + 1]
            i += 1
        if flag == "--ulimit" and ":" not in value:  # N means soft = hard = N
            name, limit = value.split("=")
            value = f"{name}={limit}:{limit}"
        if flag == "-v":
            src, dst = value.split(":")[:2]
            flag, value = "--mount", f"type=bind,source={src},target={dst}"
        out.add((flag, value))
        i += 1
    return out


def test_a_few_lines_of_config_reproduce_the_reference_ci_options_exactly(tmp_path: Path) -> None:
    (tmp_path / "rocmenv.toml").write_text(
        "[profiles.reference-ci]\n"
        'extends = "rocm"\n'
        "privileged = true\n"
        'mounts = ["/data/miles_ci:/data/miles_ci", "/data/miles_ci/models:/root/models",\n'
        '          "/data/miles_ci/datasets:/root/datasets",\n'
        '          "/data/miles_ci/hf_cache:/root/.cache/huggingface"]\n'
    )
    profile = settings_for(Context(env={}, cwd=tmp_path)).project.profile("reference-ci")
    host = HostFacts(env={}, cwd=tmp_path, checkout=None, inventory=None, check_host=False)
    spec = build_runspec(profile, Overrides(), host, image="rocm/sgl-dev:x")
    rendered = shlex.split(render_gha(spec))
    assert _normalise(rendered) == _normalise(shlex.split(REFERENCE_OPTIONS))


def test_docker_rendering_lists_every_option_once(host: FakeHost, tmp_path: Path) -> None:
    profile = replace(ROCM, network="host", cap_drop=("NET_RAW",), labels=(("team", "ml"),))
    spec = spec_for(
        profile, host, tmp_path, Overrides(gpus="0", env=("A=1",)), env={"HIP_VISIBLE_DEVICES": "0"}
    )
    argv = render_docker(spec)
    assert f"--device={host.dev_root}/kfd:/dev/kfd" in argv
    assert (
        f"--device={host.dev_root}/dri/{host.gpus[0].render_name}:/dev/dri/{host.gpus[0].render_name}"
        in argv
    )
    for expected in (
        "--group-add=44", "--group-add=109", "--cap-add=SYS_PTRACE", "--cap-drop=NET_RAW",
        "--security-opt=seccomp=unconfined", "--ipc=host", "--network=host", "--shm-size=32g",
        "--memory=0", "--memory-swap=0", "--ulimit=memlock=-1", "--ulimit=stack=67108864",
        "--ulimit=nofile=65535", "--env=A=1", "--env=HIP_VISIBLE_DEVICES=0", "--label=team=ml",
        f"--workdir={tmp_path / 'repo' / 'sub'}",
        f"--mount=type=bind,source={tmp_path / 'repo'},target={tmp_path / 'repo'}",
    ):  # fmt: skip
        assert argv.count(expected) == 1, expected


def test_gha_rendering_leaves_out_the_checkout_workdir_and_rocmenv_labels(tmp_path: Path) -> None:
    spec = spec_for(CPU, None, tmp_path)
    text = render_gha(spec)
    assert "repo" not in text and "--workdir" not in text and "rocmenv." not in text


def test_secrets_render_by_name_only(tmp_path: Path) -> None:
    profile = replace(CPU, secret_env=("WANDB_API_KEY",))
    spec = spec_for(profile, None, tmp_path, env={"WANDB_API_KEY": "super-secret-value"})
    assert "super-secret-value" not in " ".join(render_docker(spec))
    assert "super-secret-value" not in render_gha(spec)
    assert "super-secret-value" not in render_compose(spec)


def test_mount_sources_with_commas_are_quoted_for_the_mount_flag(tmp_path: Path) -> None:
    spec = RunSpec(
        image="i", mounts=(replace(spec_for(CPU, None, tmp_path).mounts[0], source="/a,b"),)
    )
    arg = next(a for a in render_docker(spec) if a.startswith("--mount="))
    assert arg == f'--mount=type=bind,"source=/a,b",target={tmp_path / "repo"}'


def test_compose_rendering_is_a_service_with_the_same_options(
    host: FakeHost, tmp_path: Path
) -> None:
    profile = replace(
        ROCM,
        ulimits=(
            Ulimit(name="nofile", soft=1024, hard=4096),
            Ulimit(name="memlock", soft=-1, hard=-1),
        ),
    )
    spec = spec_for(
        profile, host, tmp_path, Overrides(gpus="1", command=("python", "-c", 'print("hi")'))
    )
    text = render_compose(spec)
    g = host.gpus[1]
    expected = f"""services:
  rocm:
    image: "img:1"
    command:
      - "python"
      - "-c"
      - "print(\\"hi\\")"
    devices:
      - "{host.dev_root}/kfd:/dev/kfd"
      - "{host.dev_root}/dri/{g.render_name}:/dev/dri/{g.render_name}"
      - "{host.dev_root}/dri/{g.card_name}:/dev/dri/{g.card_name}"
    group_add:
      - "44"
      - "109"
    cap_add:
      - "SYS_PTRACE"
    security_opt:
      - "seccomp=unconfined"
    ipc: "host"
    shm_size: "32g"
    mem_limit: "0"
    memswap_limit: "0"
    ulimits:
      nofile:
        soft: 1024
        hard: 4096
      memlock: -1
    volumes:
      - type: "bind"
        source: "{tmp_path / "repo"}"
        target: "{tmp_path / "repo"}"
        bind:
          create_host_path: false
    environment:
      - "HIP_VISIBLE_DEVICES=0"
    working_dir: "{tmp_path / "repo" / "sub"}"
"""
    assert text == expected
    # every quoted scalar is a valid JSON string (hence a valid YAML double-quoted scalar)
    for line in text.splitlines():
        if '"' in line:
            json.loads(line.split(": ", 1)[-1].lstrip("- ").strip())
