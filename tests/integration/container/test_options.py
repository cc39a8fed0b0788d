"""``docker run $(rocmenv options …)`` and ``rocmenv run`` make the same container."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest

from tests.support import hostfacts
from tests.support.run_project import (  # noqa: F401 - fixtures
    ENGINES,
    Project,
    docker,
    inspect,
    project_fixture,
    remove_containers,
)


@pytest.fixture(name="engine", params=[e for e in ENGINES if e != "podman"])
def docker_engine(request: pytest.FixtureRequest) -> str:
    """``docker create $(rocmenv options …)`` is a docker claim: the docker engines only (for
    podman, rocmenv renders some options differently on purpose: rocmenv/engine/podman.py)."""
    return str(request.param).partition("+")[0]


HOST_CONFIG_FIELDS = (
    "Devices", "GroupAdd", "CapAdd", "CapDrop", "SecurityOpt", "Privileged", "IpcMode",
    "ShmSize", "Memory", "MemorySwap", "Ulimits", "Mounts",
)  # fmt: skip


def _relevant(doc: dict[str, Any]) -> dict[str, Any]:
    host = doc["HostConfig"]
    config = doc["Config"]
    out = {k: host.get(k) for k in HOST_CONFIG_FIELDS}
    for key in ("CapAdd", "CapDrop", "GroupAdd", "SecurityOpt"):
        out[key] = sorted(out[key] or [])
    for key in ("Devices", "Ulimits"):
        out[key] = out[key] or []  # the CLI sends [], docker-py null: the same
    out["Mounts"] = sorted(
        (m["Source"], m["Target"], bool(m.get("ReadOnly"))) for m in (host.get("Mounts") or [])
    )
    out["WorkingDir"] = config.get("WorkingDir")
    # "NAME" without "=" is a --env NAME the CLI found unset: the container does not get it
    out["Env"] = sorted(e for e in config.get("Env") or [] if "=" in e)
    out["Labels"] = {
        k: v for k, v in (config.get("Labels") or {}).items() if not k.startswith("rocmenv.")
    }
    if host.get("NetworkMode") not in ("default", "bridge", "", None):
        out["NetworkMode"] = host["NetworkMode"]
    return out


def _gid(group: str) -> str:
    import grp

    try:
        return str(grp.getgrnam(group).gr_gid)
    except KeyError:
        return group


def _rocmenv_container(
    project: Project, engine: str, profile: str, gpus: str
) -> tuple[int, str, str]:
    done = project.run(
        "run", "--engine", engine, "--profile", profile, "--gpus", gpus, "--image", project.image,
        "--keep", "--no-shims", "--", "true",
    )  # fmt: skip
    kept = re.search(r"kept container ([0-9a-f]{12})", done.stderr)
    assert kept is not None, done.stderr
    return done.returncode, kept.group(1), done.stderr


def _docker_container(project: Project, args: list[str]) -> str:
    done = docker("create", *args, project.image, "true")
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("profile", "gpus"), [("gpu-test", "0-3"), ("gpu-test", "all"), ("data", "none")]
)
def test_docker_run_with_rendered_options_equals_rocmenv_run(
    project: Project, engine: str, profile: str, gpus: str
) -> None:
    rendered = project.run(
        "options", "--format", "docker", "--json", "--profile", profile, "--gpus", gpus
    )
    assert rendered.returncode == 0, rendered.stderr
    args = json.loads(rendered.stdout)["args"]
    theirs = _docker_container(project, [*args, "--label", project.label])
    code, ours, _ = _rocmenv_container(project, engine, profile, gpus)
    try:
        assert code == 0
        assert _relevant(inspect(ours)) == _relevant(inspect(theirs))
    finally:
        remove_containers([ours, theirs])


def _refused_here(image: str) -> set[str]:
    """The reference-ci options this host cannot start (facts read from the host/engine)."""
    refused = set()
    if not hostfacts.privileged_starts(image):
        refused.add("--privileged")
    for name, value in (("memlock", -1), ("nofile", 65535), ("stack", 67108864)):
        if not hostfacts.ulimit_starts(name, value, value):
            refused.add(f"--ulimit {name}=")
    for group in ("video", "render"):
        if not hostfacts.group_resolves(group, image):
            refused.add(f"--group-add {group}")
    return refused


def test_the_reference_ci_profile_is_checked_by_create_and_inspect(
    project: Project, engine: str
) -> None:
    """The reference CI's options start where the host allows them (a GPU runner) and are
    refused, naming an option this host cannot start, where it does not (this sandbox:
    privileged, memlock=-1, nofile=65535 above the hard limits); either way the container
    rocmenv made matches ``docker create`` with the gha string."""
    rendered = project.run("options", "--format", "gha", "--profile", "reference-ci")
    assert rendered.returncode == 0, rendered.stderr
    options = rendered.stdout.strip()
    for expected in ("--privileged", "--ulimit=memlock=-1", "--device=/dev/kfd", "--device=/dev/dri",
                     "--ipc=host", "--shm-size=32g", "--security-opt=seccomp=unconfined"):  # fmt: skip
        assert expected in options
    # the gha string names /dev/kfd and /dev/dri; this host's are under the fake dev root
    dev = str(project.host.dev_root)
    args = [a.replace("=/dev/kfd", f"={dev}/kfd:/dev/kfd").replace("=/dev/dri", f"={dev}/dri:/dev/dri")
            for a in shlex.split(options)]  # fmt: skip
    theirs = _docker_container(project, [*args, "--label", project.label])
    code, ours, stderr = _rocmenv_container(project, engine, "reference-ci", "all")
    try:
        refused = _refused_here(project.image)
        if not refused:
            assert code == 0, stderr
        else:
            assert code == 125, stderr
            assert "refused" in stderr and "OCI runtime" not in stderr
            named = [o for o in ("--privileged", "--ulimit memlock=", "--ulimit nofile=",
                                 "--ulimit stack=", "--group-add video", "--group-add render")
                     if o in stderr]  # fmt: skip
            assert named, stderr
            assert set(named) <= refused, (
                f"{named} named, but the host allows {set(named) - refused}"
            )
        mine, docker_made = _relevant(inspect(ours)), _relevant(inspect(theirs))
        # gha leaves the checkout mount and workdir to the runner, and names groups (the
        # runner's GIDs apply there); rocmenv run uses this host's GIDs
        mine["Mounts"] = [m for m in mine["Mounts"] if m[0] != str(project.root)]
        mine.pop("WorkingDir"), docker_made.pop("WorkingDir")
        docker_made["GroupAdd"] = sorted(_gid(g) for g in docker_made["GroupAdd"])
        assert mine == docker_made
    finally:
        remove_containers([ours, theirs])


def test_gha_options_with_an_absent_optional_source_are_accepted_by_docker_create(
    project: Project,
) -> None:
    """The gha string renders for the runner, whose paths this host cannot check: an optional
    mount keeps ``-v`` semantics there (issue 30, item 4), so the engine accepts it on a host
    without the directory — where ``--mount`` (what was rendered before) is refused. Only
    created, never started: the daemon makes an absent ``-v`` source at start, not at create."""
    absent = project.data.parent / "absent-on-this-runner" / "models"
    with (project.root / "rocmenv.toml").open("a") as fh:
        fh.write(
            f'\n[profiles.optional-data]\nextends = "rocm"\nlabels = {{ "org.rocmenv.test" = '
            f'"{project.token}" }}\nmounts = [{{ source = "{absent}", target = "/root/models", '
            "optional = true }]\n"
        )
    rendered = project.run("options", "--format", "gha", "--profile", "optional-data")
    assert rendered.returncode == 0, rendered.stderr
    args = shlex.split(rendered.stdout)
    assert f"--volume={absent}:/root/models" in args and not absent.exists()
    made = docker("create", *args, project.image, "true", check=False)
    try:
        assert made.returncode == 0, made.stderr
        host = inspect(made.stdout.strip())["HostConfig"]
        assert f"{absent}:/root/models" in host["Binds"]
        assert not absent.exists()  # created, not started: nothing made on the host yet
    finally:
        remove_containers([made.stdout.strip()] if made.returncode == 0 else [])
    # the same mount as --mount (the old rendering) is what the engine refuses here
    old = [f"--mount=type=bind,source={absent},target=/root/models" if a.startswith("--volume=")
           else a for a in args]  # fmt: skip
    refused = docker("create", *old, project.image, "true", check=False)
    remove_containers([refused.stdout.strip()] if refused.returncode == 0 else [])
    assert refused.returncode != 0 and "does not exist" in refused.stderr
