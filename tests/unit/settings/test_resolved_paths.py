"""Where a path an untrusted checkout can shape really leads (issue 34): the checks are made on
the resolved path, not on its text. A committed symlink makes ``lockfile = "rocmenv.lock"``
lead outside the checkout; a ``..`` makes a policy path that reads as inside the checkout lie
outside it (and the other way round); the checkout itself may be reached through a link."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocmenv.errors import ConfigError
from rocmenv.settings.policy import load_policy, policy_file
from rocmenv.settings.resolve import Flags
from tests.unit.settings.test_resolve import PROJECT, UNTRUSTED_SOURCES, resolved


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "rocmenv.toml").write_text(PROJECT.replace('"from-file.lock"', '"rocmenv.lock"'))
    (root / "t.py").write_text("")
    return root


# -- the checkout's lockfile ------------------------------------------------------------------


@pytest.mark.parametrize("source", sorted(UNTRUSTED_SOURCES))
@pytest.mark.parametrize("link", ["rocmenv.lock", "locks"])
def test_an_untrusted_lockfile_through_a_committed_symlink_out_of_the_checkout_is_refused(
    project: Path, tmp_path: Path, source: str, link: str
) -> None:
    """``rocmenv.lock`` (or a directory on its way) committed as a link to a host file: the
    text stays inside the checkout, the file `pin` would write is outside."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "rocmenv.lock").write_text("")
    (project / link).symlink_to(outside / "rocmenv.lock" if link == "rocmenv.lock" else outside)
    text = (project / "rocmenv.toml").read_text()
    lockfile = "rocmenv.lock" if link == "rocmenv.lock" else "locks/rocmenv.lock"
    (project / "rocmenv.toml").write_text(
        text.replace('lockfile = "rocmenv.lock"', f'lockfile = "{lockfile}"')
    )
    flags, env = UNTRUSTED_SOURCES[source]
    with pytest.raises(ConfigError):
        resolved(project, flags, **env)
    # trusted, the same file is the user's own choice
    assert resolved(project).lockfile == project / lockfile


def test_an_untrusted_lockfile_through_a_link_that_stays_inside_is_kept(project: Path) -> None:
    (project / "locks").mkdir()
    (project / "current").symlink_to("locks")
    text = (project / "rocmenv.toml").read_text()
    (project / "rocmenv.toml").write_text(
        text.replace('lockfile = "rocmenv.lock"', 'lockfile = "current/rocmenv.lock"')
    )
    settings = resolved(project, Flags(untrusted=True))
    assert settings.lockfile == project / "current" / "rocmenv.lock"


def test_a_checkout_reached_through_a_link_keeps_its_own_lockfile(
    project: Path, tmp_path: Path
) -> None:
    """The runner's workspace path is often a link (``/home/runner/work`` → a data disk):
    the lockfile inside is inside, compared resolved on both sides."""
    via = tmp_path / "workspace"
    via.symlink_to(project)
    settings = resolved(via, Flags(untrusted=True))
    assert os.path.realpath(settings.lockfile) == str(project / "rocmenv.lock")


def test_a_dotdot_lockfile_that_comes_back_inside_is_kept(project: Path) -> None:
    text = (project / "rocmenv.toml").read_text()
    (project / "rocmenv.toml").write_text(
        text.replace('lockfile = "rocmenv.lock"', 'lockfile = "../repo/rocmenv.lock"')
    )
    settings = resolved(project, Flags(untrusted=True))
    assert os.path.realpath(settings.lockfile) == str(project / "rocmenv.lock")


# -- the policy file: outside the checkout --------------------------------------------------------


def test_a_policy_file_linked_from_outside_into_the_checkout_is_refused(
    project: Path, tmp_path: Path
) -> None:
    """``ROCMENV_POLICY=/etc/…/policy.toml`` that is a link into the checkout: the pull
    request's file, whatever the name says."""
    (project / "policy.toml").write_text('cap-add = ["ALL"]\n')
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "policy.toml").symlink_to(project / "policy.toml")
    env = {"ROCMENV_POLICY": str(etc / "policy.toml")}
    with pytest.raises(ConfigError):
        policy_file(env, project)
    with pytest.raises(ConfigError):
        resolved(project, Flags(untrusted=True), **env)


def test_a_policy_file_named_through_a_dotdot_is_judged_where_it_lies(
    project: Path, tmp_path: Path
) -> None:
    (tmp_path / "policy.toml").write_text('cap-add = ["SYS_PTRACE"]\n')
    (project / "policy.toml").write_text('cap-add = ["ALL"]\n')
    outside = {"ROCMENV_POLICY": f"{project}/../policy.toml"}  # reads as inside: lies outside
    table, _path = policy_file(outside, project) or ({}, None)
    assert table == {"cap-add": ["SYS_PTRACE"]}
    assert load_policy(outside, project).cap_add == ("SYS_PTRACE",)
    inside = {"ROCMENV_POLICY": f"{tmp_path}/elsewhere/../repo/policy.toml"}  # the reverse
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ConfigError):
        policy_file(inside, project)


def test_a_policy_file_is_inside_a_checkout_reached_through_a_link(
    project: Path, tmp_path: Path
) -> None:
    (project / "policy.toml").write_text('cap-add = ["ALL"]\n')
    via = tmp_path / "workspace"
    via.symlink_to(project)
    for checkout, named in ((via, project), (project, via)):
        with pytest.raises(ConfigError):
            policy_file({"ROCMENV_POLICY": str(named / "policy.toml")}, checkout)


def test_a_policy_file_outside_the_checkout_is_read(project: Path, tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text('cap-add = ["SYS_PTRACE"]\n')
    env = {"ROCMENV_POLICY": str(tmp_path / "policy.toml")}
    assert load_policy(env, project).cap_add == ("SYS_PTRACE",)
    assert load_policy(env, None).cap_add == ("SYS_PTRACE",)  # no checkout: nothing to be in
    # a sibling whose name begins like the checkout's is not inside it
    (tmp_path / "repo-policy").mkdir()
    (tmp_path / "repo-policy" / "p.toml").write_text('cap-add = ["NET_ADMIN"]\n')
    sibling = {"ROCMENV_POLICY": str(tmp_path / "repo-policy" / "p.toml")}
    assert load_policy(sibling, project).cap_add == ("NET_ADMIN",)


# -- the command line: exit 2, nothing written outside ---------------------------------------------


def _rocmenv(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ROCMENV_")}
    return subprocess.run(
        [sys.executable, "-m", "rocmenv", *args], cwd=cwd, env={**base, **env},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_cli_refuses_an_untrusted_lockfile_linked_out_and_leaves_the_host_file_alone(
    project: Path, tmp_path: Path
) -> None:
    host_lock = tmp_path / "host.lock"
    host_lock.write_text("the host's own\n")
    (project / "rocmenv.lock").symlink_to(host_lock)
    for args in (("config", "show"), ("pin",)):
        done = _rocmenv(project, *args, ROCMENV_UNTRUSTED="1", HOME=str(tmp_path))
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert host_lock.read_text() == "the host's own\n"
    assert _rocmenv(project, "config", "show", HOME=str(tmp_path)).returncode == 0  # trusted


def test_the_cli_refuses_a_policy_file_linked_into_the_checkout(
    project: Path, tmp_path: Path
) -> None:
    (project / "policy.toml").write_text('cap-add = ["ALL"]\n')
    (tmp_path / "policy.toml").symlink_to(project / "policy.toml")
    done = _rocmenv(project, "config", "show", ROCMENV_UNTRUSTED="1", HOME=str(tmp_path),
                    ROCMENV_POLICY=str(tmp_path / "policy.toml"))  # fmt: skip
    assert done.returncode == 2, done.stderr
