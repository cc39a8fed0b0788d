"""Issue 22, items 1 and 6: a fork's checkout shapes no host write of ``suite run``, and an
untrusted run teaches the trusted side nothing. The attacks as a fork would commit them
(links where rocmenv writes logs, reports and the history), run on the real engine and the
Slurm test bed; the host side is checked from the host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import testenv
from tests.support.run_project import (  # noqa: F401 - fixtures
    Project,
    project_fixture,
)
from tests.support.suite_project import write_suite

PAYLOAD = "import os; open(os.environ['PWNED_MARKER'], 'w').write('pwned')"


def _suite(project: Project, name: str, tests: dict[str, str], *, profile: str = "suite-test",
           gpus: int = 0) -> None:  # fmt: skip
    """``[suites.NAME]``: one test per entry (``gpus`` each), whose command is
    ``sh -c SCRIPT``."""
    write_suite(project, "unused", [])  # defines [profiles.suite-test]
    rows = ",\n".join(
        f'  {{ path = "t/{n}.py", name = "{n}", gpus = {gpus}, est-time = 5, '
        f"cmd = {json.dumps(['sh', '-c', script])} }}"
        for n, script in tests.items()
    )
    config = project.root / "rocmenv.toml"
    config.write_text(
        config.read_text() + f'\n[suites.{name}]\nprofile = "{profile}"\ntests = [\n{rows}\n]\n'
    )


def _plant_log_links(project: Project, suite: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """The fork's committed links: a dangling one into a host site-packages (a .pth there
    runs at the next host `python`) and one onto an existing host file."""
    site = tmp_path / "host-site-packages"
    site.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    logs = project.cwd / "rocmenv-suite-logs" / suite
    logs.mkdir(parents=True)
    (logs / "evil.log").symlink_to(site / "zz-rocmenv-evil.pth")
    (logs / "clobber.log").symlink_to(victim)
    return site, victim, logs


def _host_python_runs(site: Path, marker: Path) -> bool:
    """Does a host Python that reads ``site`` run something planted there?"""
    subprocess.run(
        [sys.executable, "-S", "-c", f"import site; site.addsitedir({str(site)!r})"],
        env={"PWNED_MARKER": str(marker), "PATH": "/usr/bin:/bin"}, check=False, timeout=30,
    )  # fmt: skip
    return marker.exists()


@pytest.mark.root_only  # GPU slots: the engine needs real device nodes (mknod)
@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_planted_log_links_are_replaced_never_written_through(
    project: Project, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    env: dict[str, str] = {}
    if backend == "slurm":
        slurm = request.getfixturevalue("slurm")
        env = {"ROCMENV_SYSFS_ROOT": str(slurm / "sys"), "ROCMENV_DEV_ROOT": str(slurm / "dev")}
    _suite(project, "planted", {"evil": f'echo "{PAYLOAD}"', "clobber": "echo overwritten"},
           gpus=1)  # fmt: skip
    site, victim, logs = _plant_log_links(project, "planted", tmp_path)
    done = project.run("suite", "run", "planted", "--backend", backend, "--json", env=env,
                       timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (site / "zz-rocmenv-evil.pth").exists()
    assert list(site.iterdir()) == []
    assert not _host_python_runs(site, tmp_path / "pwned")
    assert victim.read_text() == "precious\n"
    for name in ("evil", "clobber"):  # the logs are rocmenv's own files, with the output
        log = logs / f"{name}.log"
        assert log.is_file() and not log.is_symlink()
    assert PAYLOAD in (logs / "evil.log").read_text()
    assert "overwritten" in (logs / "clobber.log").read_text()
    assert project.containers() == []


def test_a_planted_log_directory_link_is_refused_before_any_test_starts(
    project: Project, tmp_path: Path
) -> None:
    _suite(project, "dirlink", {"t1": "echo ran > ran.txt"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project.cwd / "rocmenv-suite-logs").symlink_to(elsewhere)
    done = project.run("suite", "run", "dirlink", "--engine", "docker-cli")
    assert done.returncode == 2, done.stderr
    assert "symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert list(elsewhere.iterdir()) == []
    assert not (project.cwd / "ran.txt").exists()


@pytest.mark.parametrize("target", ["junit", "markdown", "step-summary"])
def test_reports_are_not_written_through_planted_links(
    project: Project, tmp_path: Path, target: str
) -> None:
    _suite(project, "reports", {"r1": "true"})
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = ["suite", "run", "reports", "--engine", "docker-cli"]
    env: dict[str, str] = {}
    if target == "junit":
        (project.cwd / "out").symlink_to(elsewhere)
        args += ["--junit", "out/junit.xml"]
    elif target == "markdown":
        (project.cwd / "summary.md").symlink_to(victim)
        args += ["--markdown", "summary.md"]
    else:
        (project.cwd / "step-summary").symlink_to(victim)
        env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(project.cwd / "step-summary")}
    done = project.run(*args, env=env)
    assert done.returncode == 2, done.stderr
    assert "symbolic link" in done.stderr and "Traceback" not in done.stderr
    assert "suite reports: 1 passed" in done.stdout  # the results were printed first
    assert victim.read_text() == "precious\n"
    assert list(elsewhere.iterdir()) == []


def test_a_test_that_swaps_the_locks_directory_for_a_link_gets_no_history_written(
    project: Project, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    config = project.root / "rocmenv.toml"
    config.write_text('lockfile = "pinned/rocmenv.lock"\n' + config.read_text())
    (project.root / "pinned").mkdir()
    swap = f"rm -rf {project.root}/pinned && ln -s {elsewhere} {project.root}/pinned"
    _suite(project, "swap", {"swapper": swap})
    done = project.run("suite", "run", "swap", "--engine", "docker-cli")
    assert done.returncode == 0, done.stderr
    assert "could not record the test times" in done.stderr
    assert "symbolic link" in done.stderr
    assert list(elsewhere.iterdir()) == []


UNTRUSTED_PROFILE = """
[profiles.fork-suite]
extends = "plain"
image = "{image}"
"""


def test_an_untrusted_run_learns_nothing_and_logs_outside_the_checkout(
    project: Project, tmp_path: Path
) -> None:
    """The attack of issue 22: with ROCMENV_UNTRUSTED=1 and a trusted ROCMENV_LOCKFILE, one
    0.2 s "pass" halved a 3600 s estimate next to the trusted lock (and Slurm's --time is
    derived from it)."""
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    history = trusted / "rocmenv.suite-history.json"
    history.write_text(json.dumps({"history_version": 1, "tests": {
        "fork-suite::slow": {"times": [3600.0], "updated": "2026-01-01T00:00:00Z"}}}))  # fmt: skip
    before = history.read_text()
    config = project.root / "rocmenv.toml"
    config.write_text(config.read_text() + UNTRUSTED_PROFILE.format(image=project.image))
    _suite(project, "fork", {"slow": "true"}, profile="fork-suite")
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    env = {
        "ROCMENV_UNTRUSTED": "1",
        "ROCMENV_LOCKFILE": str(trusted / "rocmenv.lock"),
        "ROCMENV_MIRRORS": f"docker.io={testenv.OPEN_REGISTRY}",
        "RUNNER_TEMP": str(runner_temp),
    }
    done = project.run("suite", "run", "fork", "--engine", "docker-cli", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert history.read_text() == before  # nothing learned
    assert "not recorded" in done.stderr
    logs = runner_temp / "rocmenv-suite-logs" / "fork"
    assert (logs / "slow.log").is_file()
    assert f"per-test logs in {logs}" in done.stderr  # the command says where
    assert not (project.cwd / "rocmenv-suite-logs").exists()
    (test,) = json.loads(done.stdout)["tests"]
    assert test["log"] == str(logs / "slow.log")
    # without $RUNNER_TEMP: the XDG state directory
    state = tmp_path / "state"
    done = project.run("suite", "run", "fork", "--engine", "docker-cli",
                       env={**env, "RUNNER_TEMP": "", "XDG_STATE_HOME": str(state)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (state / "rocmenv" / "suite-logs" / "fork" / "slow.log").is_file()
    assert not (project.cwd / "rocmenv-suite-logs").exists()
    assert history.read_text() == before


@pytest.mark.root_only  # GPU slots: the engine needs real device nodes (mknod)
def test_a_module_the_fork_commits_is_not_imported_by_the_slurm_node_command(
    project: Project, tmp_path: Path, slurm: Path
) -> None:
    """``python -m rocmenv`` puts the working directory (the checkout) first on ``sys.path``:
    the node-side command ran a committed ``argparse.py`` as root before rocmenv started."""
    marker = tmp_path / "pwned"
    (project.cwd / "argparse.py").write_text(
        f"open({str(marker)!r}, 'w').write('pwned')\nraise SystemExit(99)\n"
    )
    _suite(project, "planted-module", {"m1": "true"}, gpus=1)
    rocmenv = Path(sys.executable).with_name("rocmenv")  # not `-m`: the harness itself is safe
    done = subprocess.run(
        [str(rocmenv), "suite", "run", "planted-module", "--backend", "slurm"],
        cwd=project.cwd, capture_output=True, text=True, timeout=300, check=False,
        env=project.env({"ROCMENV_SYSFS_ROOT": str(slurm / "sys"),
                         "ROCMENV_DEV_ROOT": str(slurm / "dev")}),
    )  # fmt: skip
    assert not marker.exists()
    assert done.returncode == 0, done.stderr
