"""CDI on podman (4.3, specs under ``/var/run/cdi``) with the fake 8-GPU host: ``rocmenv cdi
generate`` writes the spec, a profile with ``gpu-devices = "cdi"`` runs with ``--device
amd.com/gpu=N``, and the container sees exactly the selected GPUs' nodes and ``/dev/kfd``
— trusted and untrusted."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    project_fixture,
)

pytestmark = pytest.mark.requires("podman")

CDI_DIR = Path("/var/run/cdi")
PROFILE = """
[profiles.cdi-test]
extends = "gpu-test"
gpu-devices = "cdi"
group-add = ["video"]
"""


@pytest.fixture
def cdi_spec(project: Project) -> Iterator[Path]:
    """This test's spec in podman's CDI directory, one test at a time (the kind
    ``amd.com/gpu`` may be defined once), removed afterwards."""
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    with (CDI_DIR.parent / ".rocmenv-test-cdi.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        spec = CDI_DIR / f"rocmenv-test-{project.token}.json"
        try:
            yield spec
        finally:
            spec.unlink(missing_ok=True)


@pytest.mark.parametrize("mode", ["trusted", "untrusted"])
def test_the_container_sees_exactly_the_selected_gpus_through_cdi(
    project: Project, cdi_spec: Path, mode: str
) -> None:
    config = project.root / "rocmenv.toml"
    config.write_text(config.read_text() + PROFILE)
    made = project.run("cdi", "generate", "--output", str(cdi_spec))
    assert made.returncode == 0, made.stderr
    flags = ["--untrusted"] if mode == "untrusted" else []
    env = {"ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000"}  # a trusted mirror for the image
    done = project.run(
        "run", "--engine", "podman", "--profile", "cdi-test", "--image", project.image,
        "--gpus", "5,2", *flags, "--", "sh", "-c", 'ls /dev/dri; ls /dev/kfd; echo "$HIP_VISIBLE_DEVICES"',
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    *listed, kfd, visible = done.stdout.split()
    chosen = [project.host.gpus[2], project.host.gpus[5]]
    assert sorted(listed) == sorted([g.render_name for g in chosen] + [g.card_name for g in chosen])
    assert kfd == "/dev/kfd" and visible == "0,1"
    options = project.run(
        "options", "--format", "docker", "--profile", "cdi-test", "--gpus", "5,2", *flags
    )
    assert "--device=amd.com/gpu=2 --device=amd.com/gpu=5" in options.stdout.replace("'", "")
