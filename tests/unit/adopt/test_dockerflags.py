"""``container.options`` read as the Docker CLI reads them (rocmenv.adopt.dockerflags), in every
spelling (issue 34): ``--flag value``, ``--flag=value``, short forms, and every mount option
list. A flag no profile can express is refused in each spelling — never dropped — and a
read-only mount stays read-only whatever else its option list says."""

from __future__ import annotations

import io
import shutil
import textwrap
from pathlib import Path

import pytest

from rocmenv.adopt.dockerflags import VALUE_FLAGS, option_set, parse_options, profile_keys
from rocmenv.cli import main
from rocmenv.context import Context
from rocmenv.settings.profiles import BUILTIN_PROFILES

ROOT = Path(__file__).resolve().parents[3]
MILES = ROOT / "examples" / "miles-shaped"

# flags with a value no profile can express, in the forms the Docker CLI accepts
UNEXPRESSIBLE = ["--pid=host", "--pid host", "--user=1000", "--user 1000", "-u 1000",
                 "--entrypoint=/bin/sh", "--entrypoint /bin/sh", "--gpus=all", "--gpus all",
                 "--userns=host", "--cgroupns=host", "--runtime=runc", "--uts=host",
                 "--init", "--rm", "--read-only", "--pid=container:abc"]  # fmt: skip


@pytest.mark.parametrize("flag", UNEXPRESSIBLE)
def test_a_flag_a_profile_cannot_express_is_refused_in_every_spelling(flag: str) -> None:
    opts = parse_options(f"--device /dev/kfd {flag} --ipc=host")
    assert opts.refused == [flag]
    assert opts.values == {"device": ["/dev/kfd"], "ipc": ["host"]}  # the rest still read
    assert f"refused:{flag}" in option_set(f"--ipc=host {flag}")


@pytest.mark.parametrize("attached", ["-v/a:/b", "-v=/a:/b", "-eFOO=1", "-e=FOO=1", "-w/x"])
def test_a_short_flag_with_its_value_attached_is_refused_not_dropped(attached: str) -> None:
    """``-v/a:/b`` is a mount to Docker; rocmenv does not read that spelling, so it says so."""
    opts = parse_options(f"{attached} --ipc=host")
    assert opts.refused == [attached]
    assert opts.values == {"ipc": ["host"]}


@pytest.mark.parametrize("flag", sorted(f for f in VALUE_FLAGS if f.startswith("--")))
def test_both_spellings_of_a_long_flag_mean_the_same_option(flag: str) -> None:
    value = {"--volume": "/a:/b:ro", "--mount": "type=bind,source=/a,target=/b",
             "--ulimit": "nofile=1024:2048"}.get(flag, "x=1")  # fmt: skip
    spaced, joined = parse_options(f"{flag} {value}"), parse_options(f"{flag}={value}")
    assert spaced.values == joined.values == {VALUE_FLAGS[flag]: [value]}
    assert spaced.refused == joined.refused == []
    assert option_set(f"{flag} {value}") == option_set(f"{flag}={value}")


@pytest.mark.parametrize("short", sorted(f for f in VALUE_FLAGS if not f.startswith("--")))
def test_a_short_flag_with_its_value_apart_is_read(short: str) -> None:
    value = "/a:/b" if short == "-v" else "x=1"
    assert parse_options(f"{short} {value}").values == {VALUE_FLAGS[short]: [value]}


@pytest.mark.parametrize("flag", sorted(VALUE_FLAGS))
def test_a_value_flag_at_the_end_without_its_value_is_a_usage_error(flag: str) -> None:
    from rocmenv.errors import UsageError

    with pytest.raises(UsageError):
        parse_options(f"--ipc=host {flag}")


@pytest.mark.parametrize(
    ("text", "readonly"),
    [
        ("-v /a:/b", False),
        ("-v /a:/b:ro", True),
        ("-v /a:/b:ro,z", True),
        ("-v /a:/b:z,ro", True),
        ("-v /a:/b:Z,ro,rshared", True),
        ("--volume=/a:/b:ro,Z", True),
        ("--volume /a:/b:rslave,ro", True),
        ("-v /a:/b:rw", False),
        ("-v /a:/b:rw,z", False),
        ("-v /a:/b:z", False),
        ("-v /a:/b:zro", False),  # not an option list with ro in it
        ("--mount type=bind,source=/a,target=/b", False),
        ("--mount type=bind,source=/a,target=/b,readonly", True),
        ("--mount=type=bind,src=/a,dst=/b,ro", True),
        ("--mount type=bind,source=/a,destination=/b,readonly=true", True),
        ("--mount type=bind,source=/a,target=/b,ro=1", True),
        ("--mount type=bind,source=/a,target=/b,readonly=false", False),
        ("--mount type=bind,source=/a,target=/b,bind-propagation=rshared,readonly", True),
    ],
)
def test_every_mount_option_list_keeps_read_only_as_read_only(text: str, readonly: bool) -> None:
    assert option_set(text) == {f"mount:/a:/b:{'ro' if readonly else 'rw'}"}
    keys, _ = profile_keys(parse_options(text), BUILTIN_PROFILES["rocm"])
    (mount,) = keys["mounts"]
    assert (mount["source"], mount["target"], mount.get("readonly", False)) == (
        "/a",
        "/b",
        readonly,
    )


@pytest.mark.parametrize(
    "text", ["-v named:/b", "-v /a", "-v /a:/b:ro:z", "--mount type=volume,source=v,target=/b"]
)
def test_a_mount_a_profile_cannot_express_is_a_usage_error(text: str) -> None:
    from rocmenv.errors import UsageError

    with pytest.raises(UsageError):
        option_set(text)


@pytest.mark.parametrize(
    ("text", "privileged"),
    [("--privileged", True), ("--privileged=true", True), ("--privileged=false", False),
     ("--privileged=0", False), ("--privileged=FALSE", False), ("", False),
     ("--privileged=f", False), ("--privileged=F", False), ("--privileged=False", False),
     ("--privileged=t", True), ("--privileged=1", True), ("--privileged=True", True)],
)  # fmt: skip
def test_privileged_in_each_spelling(text: str, privileged: bool) -> None:
    assert parse_options(f"--ipc=host {text}").privileged is privileged


# -- init --from-workflow: what a spelling means reaches the profile, or init refuses -------------


def _init(tmp_path: Path, options: str) -> tuple[int, Path]:
    repo = tmp_path / "repo"
    shutil.copytree(MILES, repo)
    (repo / ".git").mkdir()
    workflow = repo / ".github" / "workflows" / "w.yml"
    workflow.write_text(textwrap.dedent(f"""\
        on: push
        jobs:
          t:
            runs-on: [self-hosted, amd]
            container:
              image: rocm/sgl-dev:miles-rocm720-mi35x
              options: >-
                {options}
            steps:
              - run: true
        """))  # fmt: skip
    ctx = Context(env={"HOME": str(tmp_path)}, cwd=repo, stdout=io.StringIO(),
                  stderr=io.StringIO())  # fmt: skip
    return main(["init", "--from-workflow", str(workflow)], ctx=ctx), repo / "rocmenv.toml"


@pytest.mark.parametrize(
    "flag", ["--pid=host", "--user=1000", "--entrypoint=/bin/sh", "--gpus=all"]
)
def test_init_refuses_a_joined_flag_it_cannot_express_and_writes_nothing(
    tmp_path: Path, flag: str
) -> None:
    code, toml = _init(tmp_path, f"--device=/dev/kfd --device=/dev/dri {flag} --ipc=host")
    assert code == 2
    assert not toml.exists()


@pytest.mark.parametrize("spec", ["/models:/models:ro,z", "/models:/models:z,ro"])
def test_init_adopts_a_read_only_mount_with_an_option_list_as_read_only(
    tmp_path: Path, spec: str
) -> None:
    import tomllib

    code, toml = _init(tmp_path, f"--device=/dev/kfd --device=/dev/dri -v {spec}")
    assert code == 0
    profiles = tomllib.loads(toml.read_text())["profiles"]
    mounts = [m for p in profiles.values() for m in p.get("mounts", [])]
    assert [(m["source"], m.get("readonly", False)) for m in mounts] == [("/models", True)]


@pytest.mark.parametrize(
    "text", ["--privileged=no", "--privileged=off", "--privileged=fAlse", "--privileged="]
)
def test_a_boolean_docker_refuses_is_refused_not_guessed(text: str) -> None:
    opts = parse_options(f"--ipc=host {text}")
    assert text in opts.refused and not opts.privileged
