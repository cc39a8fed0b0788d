"""What ``container.options`` become in a profile (rocmenv.adopt.dockerflags.profile_keys and
option_set), key by key over the built-in ``rocm`` profile: only what differs is written,
a value Docker would default is stated, GPUs are "all" only when both GPU nodes are passed,
credentials are secret-env, never pass-env."""

from __future__ import annotations

from typing import Any

import pytest

from rocmenv.adopt.dockerflags import option_set, parse_options, profile_keys
from rocmenv.errors import UsageError
from rocmenv.settings.profiles import BUILTIN_PROFILES

ROCM = BUILTIN_PROFILES["rocm"]
# the rocm profile's own options: profile_keys over rocm writes nothing for these
SAME = ("--device /dev/kfd --device /dev/dri --group-add video --group-add render "
        "--security-opt seccomp=unconfined --cap-add SYS_PTRACE --ipc host --shm-size 32g "
        "--memory 0 --memory-swap 0 --ulimit memlock=-1 --ulimit stack=67108864 "
        "--ulimit nofile=65535 -v /data/miles_ci:/data/miles_ci "
        "-v /data/miles_ci/models:/root/models -v /data/miles_ci/datasets:/root/datasets "
        "-v /data/miles_ci/hf_cache:/root/.cache/huggingface -e HIP_VISIBLE_DEVICES")  # fmt: skip


def keys(text: str) -> tuple[dict[str, Any], list[str]]:
    """The keys written besides ``mounts`` (the job's own mounts are always written)."""
    written, notes = profile_keys(parse_options(text), ROCM)
    written.pop("mounts", None)
    return written, notes


def test_the_base_profiles_own_options_write_no_key_but_the_jobs_mounts() -> None:
    assert keys(SAME) == ({}, [])
    written, _ = profile_keys(parse_options(SAME), ROCM)
    assert [(m["source"], m["target"]) for m in written["mounts"]] == [
        (m.source, m.target) for m in ROCM.mounts
    ]


def test_a_job_without_mounts_writes_none_so_the_base_profiles_are_not_inherited() -> None:
    written, _ = profile_keys(parse_options("--ipc host"), ROCM)
    assert written["mounts"] == []


@pytest.mark.parametrize(
    ("change", "key", "value"),
    [
        ("--device /dev/kfd", "gpus", "none"),  # one GPU node is not GPUs
        ("--group-add video", "group-add", ["video"]),
        ("--security-opt label=disable", "security-opt", ["seccomp=unconfined", "label=disable"]),
        ("--cap-add cap_net_admin", "cap-add", ["SYS_PTRACE", "NET_ADMIN"]),
        ("--cap-drop cap_mknod", "cap-drop", ["MKNOD"]),
        ("--ipc private", "ipc", "private"),
        ("--network host", "network", "host"),
        ("--shm-size 64g", "shm-size", "64g"),
        ("--memory 8g", "memory", "8g"),
        ("--memory-swap 9g", "memory-swap", "9g"),
        ("-w /ws", "workdir", "/ws"),
        ("--privileged", "privileged", True),
        ("--label a=b=c", "labels", {"a": "b=c"}),
    ],
)
def test_a_changed_option_becomes_its_key(change: str, key: str, value: Any) -> None:
    base = SAME
    if key == "group-add":
        base = base.replace("--group-add render ", "")
        change = ""
    if key == "gpus":
        base = base.replace("--device /dev/dri ", "")
        change = ""
    written, _ = keys(f"{base} {change}")
    assert written == {key: value} if key != "gpus" else written["gpus"] == "none"


def test_gpus_need_both_nodes_in_any_spelling_and_other_devices_stay_devices() -> None:
    written, _ = keys(SAME.replace("--device /dev/dri", "--device /dev/dri:/dev/dri:rwm")
                      + " --device /dev/infiniband/uverbs0")  # fmt: skip
    assert written == {"devices": ["/dev/infiniband/uverbs0"]}
    only_kfd, _ = keys(SAME.replace("--device /dev/dri ", ""))
    assert only_kfd["gpus"] == "none" and only_kfd["devices"] == ["/dev/kfd"]


@pytest.mark.parametrize(
    ("dropped", "key", "default"),
    [("--ipc host", "ipc", "private"), ("--shm-size 32g", "shm-size", "64m"),
     ("--memory 0", "memory", "0"), ("--memory-swap 0", "memory-swap", "0")],
)  # fmt: skip
def test_an_option_left_to_docker_is_stated_with_a_note(
    dropped: str, key: str, default: str
) -> None:
    written, notes = keys(SAME.replace(dropped, ""))
    assert written == {key: default}
    assert len(notes) == 1 and key in notes[0]


def test_ulimits_are_written_whole_when_one_differs() -> None:
    written, _ = keys(SAME.replace("nofile=65535", "nofile=1024:4096"))
    assert written == {"ulimits": {"memlock": -1, "stack": 67108864, "nofile": "1024:4096"}}


def test_mounts_are_written_whole_and_optional_when_one_differs() -> None:
    written, _ = profile_keys(parse_options(SAME + " -v /models:/models:ro"), ROCM)
    assert written["mounts"][-1] == {"source": "/models", "target": "/models",
                                     "readonly": True, "optional": True}  # fmt: skip
    assert all(m["optional"] is True for m in written["mounts"])


def test_environment_is_fixed_passed_or_secret() -> None:
    written, _ = keys(SAME + " -e A=1 -e HOME -e HF_TOKEN -e MY_PASSWORD -e AWS_SECRET_KEY")
    assert written == {"env": {"A": "1"}, "pass-env": ["HIP_VISIBLE_DEVICES", "HOME"],
                       "secret-env": ["HF_TOKEN", "MY_PASSWORD", "AWS_SECRET_KEY"]}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "options"),
    [
        ("--privileged", {"privileged"}),
        ("--ulimit nofile=1024", {"ulimit:nofile=1024:1024"}),
        ("--ulimit=nofile=1024:2048", {"ulimit:nofile=1024:2048"}),
        ("--cap-add cap_sys_ptrace --cap-drop Cap_Mknod", {"cap-add:SYS_PTRACE", "cap-drop:MKNOD"}),
        ("--mount target=/b,source=/a", {"mount:/a:/b:rw"}),
        ("--mount target=/b", {"mount::/b:rw"}),
        ("--mount type=bind,src=/a,target=/b,readonly", {"mount:/a:/b:ro"}),
        ("-e X=1 --label l=v", {"env:X=1", "label:l=v"}),
        ("stray --ipc=host", {"refused:stray", "ipc:host"}),
    ],
)
def test_the_canonical_option_set(text: str, options: set[str]) -> None:
    assert option_set(text) == options


@pytest.mark.parametrize(
    ("text", "named"),
    [("--ipc 'host", "container.options"), ("--mount type=tmpfs,target=/t", "/t"),
     ("-v a:b", "a:b"), ("--ulimit nofile=x", "nofile=x"), ("--ipc=host --ulimit", "--ulimit")],
)  # fmt: skip
def test_a_flag_init_cannot_read_is_a_usage_error_naming_it(text: str, named: str) -> None:
    with pytest.raises(UsageError) as caught:
        option_set(text)
    assert named in caught.value.what


def test_a_github_expression_is_refused_with_a_remedy() -> None:
    with pytest.raises(UsageError) as caught:
        parse_options("${{ inputs.options }}")
    assert caught.value.hint
