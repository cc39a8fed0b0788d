"""``rocmenv run`` on the real engine, through both adapters: devices, groups, caps, ipc,
shm, ulimits, mounts, environment, streams and exit codes."""

from __future__ import annotations

import os
import re

import pytest

from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    engine_fixture,
    every_engine,
    one_engine,
    project_fixture,
)


def run(project: Project, engine: str, *args: str, profile: str = "gpu-test", **kw: object):
    return project.run(
        "run",
        "--engine",
        engine,
        "--profile",
        profile,
        "--image",
        project.image,
        *args,
        **kw,  # type: ignore[arg-type]
    )


def test_four_of_eight_gpus_are_exactly_the_nodes_inside(project: Project, engine: str) -> None:
    done = run(project, engine, "--gpus", "4-7", "--", "sh", "-c", "ls /dev/dri; ls /dev/kfd")
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split()
    expected = sorted(
        [g.render_name for g in project.host.gpus[4:]]
        + [g.card_name for g in project.host.gpus[4:]]
    )
    assert sorted(listed[:-1]) == expected
    assert listed[-1] == "/dev/kfd"


def test_gpus_all_passes_every_node_and_uuid_selection_works(project: Project, engine: str) -> None:
    done = run(project, engine, "--gpus", "all", "--", "ls", "/dev/dri")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == 17  # 8 render + 8 card + the BMC's card0
    uuid = project.host.gpus[2].uuid
    done = run(project, engine, "--gpus", uuid, "--", "ls", "/dev/dri")
    assert done.stdout.split() == sorted(
        [project.host.gpus[2].card_name, project.host.gpus[2].render_name]
    )


def test_env_isolation_passes_all_nodes_and_sets_the_visible_devices(
    project: Project, engine: str
) -> None:
    done = run(
        project, engine, "--gpus", "1,6", "--", "sh", "-c", 'ls /dev/dri | wc -l; echo "$HIP_VISIBLE_DEVICES"',
        profile="gpu-env",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["17", "1,6"]


@one_engine
def test_no_kfd_without_gpus_none_is_a_clear_error(project: Project, engine: str) -> None:
    (project.host.dev_root / "kfd").unlink()
    done = run(project, engine, "--", "true")
    assert done.returncode == 2
    assert "kfd does not exist" in done.stderr and "--gpus none" in done.stderr
    assert run(project, engine, "--gpus", "none", "--", "true").returncode == 0


@pytest.mark.parametrize("gpus", ["8", "0-9", "0,0", "x"])
@one_engine
def test_bad_gpus_are_refused_before_anything_runs(
    project: Project, engine: str, gpus: str
) -> None:
    done = run(project, engine, "--gpus", gpus, "--", "true")
    assert done.returncode == 2
    assert "--gpus" in done.stderr
    assert project.containers() == []


def test_groups_are_the_hosts_gids(project: Project, engine: str) -> None:
    _name, gid = project.group
    done = run(project, engine, "--gpus", "0", "--", "id", "-G")
    assert done.returncode == 0, done.stderr
    groups = done.stdout.split()
    assert "44" in groups and str(gid) in groups  # video, and a group only the host has


def test_capabilities_security_and_ipc_are_applied(project: Project, engine: str) -> None:
    done = run(
        project, engine, "--gpus", "0", "--",
        "sh", "-c", "grep CapEff /proc/self/status; grep Seccomp: /proc/self/status; readlink /proc/self/ns/ipc",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cap_line, seccomp_line, ipc_ns = done.stdout.splitlines()
    cap_eff = int(cap_line.split()[1], 16)
    assert cap_eff & (1 << 19), "CAP_SYS_PTRACE (bit 19) missing"
    assert seccomp_line.split()[1] == "0"  # seccomp=unconfined
    assert ipc_ns == os.readlink("/proc/self/ns/ipc")  # --ipc=host


def test_shm_size_applies_with_private_ipc(project: Project, engine: str) -> None:
    done = run(project, engine, "--", "sh", "-c", "df -k /dev/shm | tail -1", profile="shm-test")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == str(64 * 1024)


def test_ulimits_apply(project: Project, engine: str) -> None:
    done = run(project, engine, "--gpus", "0", "--", "sh", "-c", "ulimit -n; ulimit -Hn; ulimit -s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1024", "4096", str(67108864 // 1024)]


def test_checkout_is_mounted_at_its_path_and_is_the_workdir(project: Project, engine: str) -> None:
    (project.root / "marker.txt").write_text("in the checkout\n")
    done = run(
        project,
        engine,
        "--gpus",
        "none",
        "--",
        "sh",
        "-c",
        "pwd; cat ../marker.txt; touch made-inside",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(project.cwd), "in the checkout"]
    assert (project.cwd / "made-inside").exists()


def test_data_mounts_apply_and_absent_optional_ones_are_skipped(
    project: Project, engine: str
) -> None:
    done = run(
        project,
        engine,
        "--",
        "sh",
        "-c",
        "cat /data/hello.txt; ls /absent 2>&1 || echo no-absent",
        profile="data",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "hello from the host"
    assert done.stdout.splitlines()[-1] == "no-absent"
    assert "optional mounts skipped" in done.stderr


def test_cli_volumes_mount_read_only(project: Project, engine: str) -> None:
    done = run(
        project, engine, "-v", f"{project.data}:/mnt/d:ro", "--",
        "sh", "-c", "cat /mnt/d/hello.txt; touch /mnt/d/x 2>/dev/null && echo writable || echo read-only",
        profile="plain",
    )  # fmt: skip
    assert done.stdout.splitlines() == ["hello from the host", "read-only"], done.stderr


def test_a_missing_mount_source_is_refused_without_creating_it(
    project: Project, engine: str
) -> None:
    missing = project.data / "nope"
    done = run(project, engine, "-v", f"{missing}:/x", "--", "true", profile="plain")
    assert done.returncode == 2
    assert f"mount source {missing}" in done.stderr
    assert not missing.exists()


def test_untrusted_mode_mounts_data_read_only_and_passes_no_secret(
    project: Project, engine: str
) -> None:
    policy = project.data.parent / "policy.toml"  # the trusted side declares the data source
    policy.write_text(f'mount-sources = ["{project.data}"]\n')
    done = run(
        project, engine, "--untrusted", "--", "sh", "-c",
        'touch /data/x 2>/dev/null && echo writable || echo read-only; echo "secret=${ROCMENV_TEST_SECRET:-}"',
        profile="data",
        # the policy allows rocm/sgl-dev: the test registry serves it as a trusted mirror
        env={"ROCMENV_TEST_SECRET": "s3cr3t-value", "ROCMENV_MIRRORS": "docker.io=127.0.0.1:5000",
             "ROCMENV_POLICY": str(policy)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["read-only", "secret="]
    assert len([line for line in done.stderr.splitlines() if "untrusted mode" in line]) == 1


def test_only_declared_variables_pass(project: Project, engine: str) -> None:
    host_env = {
        "ROCMENV_TEST_SECRET": "declared-secret",
        "UNDECLARED_TOKEN": "must-not-pass",
        "HIP_VISIBLE_DEVICES": "0,1",
        "HTTPS_PROXY": "http://proxy.invalid:3128",
    }
    done = run(project, engine, "--gpus", "0", "-e", "EXTRA=1", "--", "env", env=host_env)
    assert done.returncode == 0, done.stderr
    seen = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    assert seen["ROCMENV_TEST_SECRET"] == "declared-secret"
    assert seen["HIP_VISIBLE_DEVICES"] == "0"  # the host's 0,1 renumbered for --gpus 0
    assert seen["HF_HUB_OFFLINE"] == "1" and seen["EXTRA"] == "1"
    assert "UNDECLARED_TOKEN" not in seen
    assert "HTTPS_PROXY" not in seen  # declared, but a proxy variable: dropped
    assert seen["ROCM_PATH"] == "/opt/rocm"  # the image's own environment stays


@one_engine
def test_proxy_variables_pass_when_the_profile_keeps_them(project: Project, engine: str) -> None:
    done = run(
        project, engine, "--", "env", profile="proxy-kept", env={"HTTPS_PROXY": "http://p:1"}
    )
    assert "HTTPS_PROXY=http://p:1" in done.stdout.splitlines()


@every_engine
def test_stdout_and_stderr_stay_separate(project: Project, engine: str) -> None:
    script = "for i in 1 2 3; do echo out$i; echo err$i >&2; done"
    done = run(project, engine, "--", "sh", "-c", script, profile="plain")
    assert done.returncode == 0
    assert done.stdout == "out1\nout2\nout3\n"
    assert [line for line in done.stderr.splitlines() if line.startswith("err")] == [
        "err1",
        "err2",
        "err3",
    ]


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (["true"], 0),
        (["sh", "-c", "exit 3"], 3),
        (["no-such-command-xyz"], 127),
        (["sh", "-c", 'sh -c "kill -9 \\$\\$"'], 137),  # PID 1 cannot be killed from inside
        (["sh", "-c", 'sh -c "kill -TERM \\$\\$"'], 143),
    ],
)
def test_exit_codes_are_the_commands(
    project: Project, engine: str, command: list[str], code: int
) -> None:
    done = run(project, engine, "--", *command, profile="plain")
    assert done.returncode == code, done.stderr
    if code == 127:
        assert "not found" in done.stderr and "OCI runtime" not in done.stderr


@every_engine
def test_a_container_killed_from_outside_exits_137(project: Project, engine: str) -> None:
    from tests.support.run_project import docker, podman, wait_for

    proc = project.popen(
        "run",
        "--engine",
        engine,
        "--profile",
        "plain",
        "--image",
        project.image,
        "--",
        "sleep",
        "60",
    )
    try:
        assert wait_for(lambda: any(_running(c) for c in project.containers()), 30)
        for c in project.containers():
            (podman if engine == "podman" else docker)("kill", c, check=False)
        assert proc.wait(30) == 137
    finally:
        proc.kill()
        proc.wait()


def _running(container: str) -> bool:
    from tests.support.run_project import inspect

    try:
        return bool(inspect(container)["State"]["Running"])
    except Exception:  # gone meanwhile
        return False


def test_containers_are_removed_and_labelled(project: Project, engine: str) -> None:
    done = run(project, engine, "--keep", "--", "true", profile="plain")
    assert done.returncode == 0, done.stderr
    kept = re.search(r"kept container ([0-9a-f]{12})", done.stderr)
    assert kept is not None
    from tests.support.run_project import inspect, remove_containers

    labels = inspect(kept.group(1))["Config"]["Labels"]
    remove_containers([kept.group(1)])
    assert labels["rocmenv.profile"] == "plain"
    assert re.fullmatch(r"[0-9a-f]{12}", labels["rocmenv.session"])
    assert labels["rocmenv.owner-host"] == os.uname().nodename
    assert labels["rocmenv.owner-pid"].isdigit()
    assert labels["rocmenv.image-digest"].startswith("sha256:")
    assert run(project, engine, "--", "true", profile="plain").returncode == 0
    assert project.containers() == []


@every_engine
def test_stdin_is_attached_for_shell(project: Project, engine: str) -> None:
    done = project.run(
        "shell", "--engine", engine, "--profile", "plain", "--image", project.image, "--no-tty",
        input="echo hello-from-shell; echo $0; exit 5\n",
    )  # fmt: skip
    assert done.returncode == 5, done.stderr
    assert done.stdout.splitlines() == ["hello-from-shell", "bash"]


@every_engine
def test_a_terminal_gets_a_tty(project: Project, engine: str) -> None:
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocmenv", "run", "--engine", engine, "--profile", "plain",
         "--image", project.image, "--", "sh", "-c", "tty; echo done"],
        cwd=project.cwd, env=project.env(), stdin=follower, stdout=follower, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    code = proc.wait(60)
    os.close(leader)
    assert code == 0, proc.stderr.read() if proc.stderr else ""
    text = output.decode(errors="replace")
    assert re.search(r"/dev/pts/\d+", text) and "done" in text


@one_engine
def test_pull_never_with_an_absent_image_says_so(project: Project, engine: str) -> None:
    done = project.run(
        "run", "--engine", engine, "--profile", "plain", "--pull", "never",
        "--image", "127.0.0.1:5000/rocmenv-test/absent:nope", "--", "true",
    )  # fmt: skip
    assert done.returncode == 125
    assert "not present" in done.stderr and "--pull is never" in done.stderr


def test_an_image_pythonpath_survives_the_launcher(project: Project, engine: str, family) -> None:
    image = family["aiter-old-pythonpath"].ref
    probe = ["python3", "-c", "import os; print(os.environ['PYTHONPATH'])"]
    base = ["run", "--engine", engine, "--profile", "plain", "--image", image]
    with_shims = project.run(*base, "--", *probe)
    assert with_shims.returncode == 0, with_shims.stderr
    entries = with_shims.stdout.strip().split(":")
    assert entries[0] == "/opt/rocmenv/launcher" and "/opt/image-site" in entries
    mounts = project.run(*base, "--", "sh", "-c", "grep /opt/rocmenv/launcher /proc/mounts")
    kinds = {
        line.split()[1]: (line.split()[2], line.split()[3]) for line in mounts.stdout.splitlines()
    }
    assert kinds["/opt/rocmenv/launcher"][1].startswith("ro")
    assert kinds["/opt/rocmenv/launcher/__pycache__"][0] == "tmpfs"  # the launcher's pyc, private
    without = project.run(*base, "--no-shims", "--", *probe)
    assert without.stdout.strip() == "/opt/image-site"


def test_engine_not_running_says_how_to_start_it(project: Project, engine: str) -> None:
    if engine == "podman":  # daemonless: "not running" is "not installed"
        done = run(project, engine, "--", "true", profile="plain", env={"PATH": str(project.data)})
        assert done.returncode == 125
        assert (
            "the podman command is not on PATH" in done.stderr and "install podman" in done.stderr
        )
        return
    env = {"DOCKER_HOST": f"unix://{project.data}/no-docker.sock"}
    done = run(project, engine, "--", "true", profile="plain", env=env)
    assert done.returncode == 125
    assert "systemctl start docker" in done.stderr


def test_a_ulimit_above_the_hard_limit_names_the_option(project: Project, engine: str) -> None:
    done = run(project, engine, "--", "true", profile="nofile-too-high")
    assert done.returncode == 125
    assert "--ulimit nofile=" in done.stderr and "refused" in done.stderr
    assert "OCI runtime" not in done.stderr and "Error response" not in done.stderr
    assert project.containers() == []


def test_a_group_neither_host_nor_image_has_names_the_option(project: Project, engine: str) -> None:
    done = run(project, engine, "--", "true", profile="render-group")
    assert done.returncode == 125
    assert f"--group-add render-{project.group[0]}-absent" in done.stderr
    assert "OCI runtime" not in done.stderr


@pytest.mark.parametrize("kind", ["docker-api", "docker-cli"])
def test_a_run_imports_neither_docker_py_nor_python_on_whales(project: Project, kind: str) -> None:
    """The hot path stays light: docker-py (~0.15 s) and python-on-whales (~0.3 s) are
    imported only for pulls, listings and logs (see the adapters)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from rocmenv.cli import main\n"
        f"rc = main(['run', '--engine', {kind!r}, '--profile', 'plain', '--image', {project.image!r},"
        " '--', 'true'])\n"
        "heavy = [m for m in ('docker', 'python_on_whales', 'pydantic', 'requests') if m in sys.modules]\n"
        "print(heavy)\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=project.cwd, env=project.env(),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_docker_api_works_from_a_sibling_container_with_only_the_socket(
    project: Project, family
) -> None:
    """A runner container with /var/run/docker.sock mounted and no docker CLI: rocmenv
    starts a sibling container and says that bind sources are the engine host's paths."""
    import subprocess
    from pathlib import Path

    import rocmenv

    repo = str(Path(rocmenv.__file__).resolve().parents[1])
    base = family["demo"].base.image
    done = subprocess.run(
        ["docker", "run", "--rm", "--label", project.label,
         "-v", "/var/run/docker.sock:/var/run/docker.sock",
         "-v", f"{repo}:{repo}:ro", "-v", f"{project.root}:{project.root}",
         "-w", str(project.cwd), "-e", f"PYTHONPATH={repo}", "-e", "ROCMENV_SHIMS_QUIET=1",
         base, "sh", "-c",
         "command -v docker >/dev/null && echo HAS-DOCKER-CLI; "
         f"python3 -m rocmenv run --engine docker-api --profile plain --no-shims --image {project.image}"
         " -- sh -c 'pwd; echo from-the-sibling'"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "HAS-DOCKER-CLI" not in done.stdout
    assert done.stdout.splitlines() == [str(project.cwd), "from-the-sibling"]
    assert "bind-mount sources are paths on the engine's host" in done.stderr


@one_engine
def test_an_image_for_another_gpu_family_is_warned_about(
    project: Project, engine: str, family
) -> None:
    image = family["sgl-new"].ref  # ...-mi35x-... on the fake MI300X (gfx942) host
    done = project.run(
        "run",
        "--engine",
        engine,
        "--profile",
        "gpu-test",
        "--gpus",
        "0",
        "--image",
        image,
        "--",
        "true",
    )
    assert done.returncode == 0, done.stderr
    assert "built for mi35x" in done.stderr and "gfx942" in done.stderr
    same = run(project, engine, "--gpus", "0", "--", "true")  # the demo image is mi30x
    assert "built for" not in same.stderr


@pytest.mark.parametrize("policy", ["missing", "always"])
def test_pull_policies_fetch_an_absent_image(
    project: Project, engine: str, policy: str, registry
) -> None:
    import subprocess

    repo = registry.unique_repo(f"run-pull-{policy}")
    registry.push_manifest_copy(project.image, repo, "t1")
    ref = registry.ref(repo, "t1")
    try:
        done = project.run(
            "run", "--engine", engine, "--profile", "plain", "--pull", policy, "--image", ref,
            "--", "echo", "pulled-and-ran",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout == "pulled-and-ran\n"
        assert f"pulling {ref}" in done.stderr  # one line, no progress bar: not a terminal
        again = project.run(
            "run",
            "--engine",
            engine,
            "--profile",
            "plain",
            "--pull",
            "missing",
            "--image",
            ref,
            "--",
            "true",
        )
        assert "pulling" not in again.stderr
    finally:
        subprocess.run(["docker", "rmi", ref], capture_output=True, check=False)


@one_engine
def test_a_pinned_profile_runs_the_locked_digest(project: Project, engine: str, family) -> None:
    from tests.support.run_project import inspect, remove_containers

    demo = family["demo"]
    with (project.root / "rocmenv.toml").open("a") as fh:
        fh.write(
            f'\n[profiles.pinned]\nextends = "plain"\nimage = "{demo.registry}/{demo.repository}"\n'
            f'tag = "{demo.tag}"\n'
        )
    pinned = project.run("pin", "--profile", "pinned")
    assert pinned.returncode == 0, pinned.stderr
    digest = re.search(r"@(sha256:[0-9a-f]{64})", pinned.stdout)
    assert digest is not None, pinned.stdout
    done = project.run("run", "--engine", engine, "--profile", "pinned", "--keep", "--", "true")
    kept = re.search(r"kept container ([0-9a-f]{12})", done.stderr)
    assert done.returncode == 0 and kept is not None, done.stderr
    doc = inspect(kept.group(1))
    remove_containers([kept.group(1)])
    assert doc["Config"]["Image"].endswith("@" + digest.group(1))
    assert doc["Config"]["Labels"]["rocmenv.image-digest"] == digest.group(1)
