"""The untrusted denylist's rules one by one (issue 21): which host paths a data mount or the
checkout may not be, the reason each refusal gives, where the engine's socket, the runner's
directories and the credentials are found, and the socket scan — against real directories
and real sockets."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmenv.container.hostpaths import (
    ENGINE_SOCKETS,
    HOME_SECRETS,
    checkout_problem,
    engine_sockets,
    find_socket,
    mount_problem,
    runner_dirs,
    user_secrets,
)


def no_socket(_path: str) -> str | None:
    return None


def problem(source: str, checkout: str | None = None, env: dict[str, str] | None = None,
            links: dict[str, str] | None = None, sockets: tuple[str, ...] = ()) -> str | None:  # fmt: skip
    """mount_problem with a file system of ``links`` (path -> where it leads) and
    ``sockets`` (the paths find_socket reports as sockets)."""
    links = links or {}
    return mount_problem(
        source, checkout, env or {}, lambda p: links.get(p, os.path.normpath(p)),
        lambda p: next((s for s in sockets if s == p or s.startswith(p + "/")), None),
    )  # fmt: skip


@pytest.fixture
def bound_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "d" / "e" / "s"
    path.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        yield path


# -- mount_problem -----------------------------------------------------------------------------


def test_an_ordinary_directory_is_not_refused() -> None:
    assert problem("/data/models", checkout="/ci/repo") is None
    assert problem("/data/models") is None


def test_a_mount_inside_the_checkout_is_the_jobs_own_files_even_under_a_forbidden_root() -> None:
    assert problem("/home/ci/repo/data", checkout="/home/ci/repo") is None
    assert problem("/home/ci/repo", checkout="/home/ci/repo") is None


def test_a_checkout_path_that_leads_out_of_the_checkout_is_judged_where_it_leads() -> None:
    links = {"/ci/repo/x": "/etc/ssl"}
    assert problem("/ci/repo/x", checkout="/ci/repo", links=links) == "nothing of /etc"


def test_the_checkout_is_compared_as_written_and_where_its_links_lead() -> None:
    # the checkout is reached through a link: a source under either spelling is inside it
    links = {"/ci/link": "/ci/repo", "/ci/link/data": "/ci/repo/data"}
    assert problem("/ci/repo/data", checkout="/ci/link", links=links) is None
    assert problem("/ci/link/data", checkout="/ci/link", links=links) is None


def test_a_source_written_with_dots_is_judged_normalised() -> None:
    assert problem("/data/../etc/x", checkout="/ci/repo", links={"/data/../etc/x": "/data"}) == (
        "nothing of /etc"
    )


def test_a_path_ending_in_sock_is_refused_as_a_socket() -> None:
    assert problem("/data/agent.sock") == "no sockets"


def test_a_socket_is_refused_and_a_directory_holding_one_names_it() -> None:
    assert problem("/data/s", sockets=("/data/s",)) == "no sockets"
    assert problem("/data", sockets=("/data/deep/s",)) == "no sockets (/data/deep/s is one)"


def test_the_engine_socket_and_directories_holding_it_are_refused() -> None:
    env = {"DOCKER_HOST": "unix:///srv/engine/docker.sock"}
    for source in ("/srv/engine", "/srv"):
        assert problem(source, env=env) == (
            "no mount of the engine's socket /srv/engine/docker.sock or a directory holding it"
        )


@pytest.mark.parametrize("path", ["/tmp", "/var/tmp", "/var/lib", "/usr", "/lib", "/bin"])
def test_the_root_and_system_directories_themselves_are_refused(path: str) -> None:
    assert problem(path) == "not the host's root or a system directory"


@pytest.mark.parametrize("path", ["/", "/var"])
def test_the_root_and_var_are_refused_first_as_holding_the_engines_socket(path: str) -> None:
    assert problem(path) == (
        "no mount of the engine's socket /var/run/docker.sock or a directory holding it"
    )


def test_below_a_system_directory_that_is_no_forbidden_root_is_allowed() -> None:
    assert problem("/usr/share/models") is None
    assert problem("/tmp/data") is None


@pytest.mark.parametrize("root", ["/var/lib/docker", "/var/lib/kubelet", "/boot", "/etc"])
def test_a_forbidden_root_below_it_and_a_directory_above_it_name_the_root(root: str) -> None:
    assert problem(root) == f"nothing of {root}"
    assert problem(root + "/x/y") == f"nothing of {root}"
    assert problem(os.path.dirname(root) + "-other") is None  # a sibling with a longer name


def test_a_directory_holding_a_forbidden_root_is_refused_naming_it() -> None:
    assert problem("/var/lib/docker/..", links={"/var/lib/docker/..": "/var/lib"}) == (
        "not the host's root or a system directory"
    )
    assert problem("/srv/x", links={"/srv/x": "/var/lib/containers"}) == (
        "nothing of /var/lib/containers"
    )


def test_a_directory_holding_the_checkout_is_refused_as_written_and_resolved() -> None:
    assert problem("/ci", checkout="/ci/repo") == "no directory containing the checkout"
    links = {"/ci/link": "/build/repo"}
    assert problem("/build", checkout="/ci/link", links=links) == (
        "no directory containing the checkout"
    )


def test_the_runners_work_directories_outside_the_checkout_are_refused() -> None:
    env = {"RUNNER_WORKSPACE": "/srv/runner/_work/repo", "RUNNER_TEMP": "/srv/rt"}
    rule = "nothing of the runner's work directory {} outside the checkout"
    assert problem("/srv/runner/_work/other", env=env) == rule.format("/srv/runner/_work")
    assert problem("/srv/rt/x", env=env) == rule.format("/srv/rt")


def test_the_credentials_in_home_and_docker_config_are_refused() -> None:
    env = {"HOME": "/opt/ci", "DOCKER_CONFIG": "/opt/dc"}
    rule = "nothing of the credentials in {} (or a directory holding them)"
    assert problem("/opt/ci/.ssh/keys", env=env) == rule.format("/opt/ci/.ssh")
    assert problem("/opt/ci", env=env) == rule.format("/opt/ci/.docker")
    assert problem("/opt/dc", env=env) == rule.format("/opt/dc")
    assert problem("/opt/ci/models", env=env) is None


def test_each_path_is_judged_on_both_spellings() -> None:
    # as written harmless, resolved a secret: refused; and the other way round
    env = {"HOME": "/opt/ci"}
    assert problem("/data/k", env=env, links={"/data/k": "/opt/ci/.kube"}) is not None
    assert problem("/opt/ci/.aws", env=env, links={"/opt/ci/.aws": "/data"}) is not None


# -- checkout_problem --------------------------------------------------------------------------


def test_a_checkout_in_home_or_anywhere_ordinary_is_allowed() -> None:
    assert checkout_problem("/home/ci/repo", {}) is None
    assert checkout_problem("/srv/ci/repo", {"RUNNER_TEMP": "/srv/rt"}) is None


@pytest.mark.parametrize(
    ("path", "env"),
    [
        ("/", {}),
        ("/usr", {}),
        ("/var", {}),  # holds /var/lib/docker
        ("/srv", {"DOCKER_HOST": "unix:///srv/d.sock"}),
        ("/srv", {"RUNNER_TEMP": "/srv/rt"}),
        ("/run", {}),  # is a forbidden root (holds the engine's socket too)
    ],
)
def test_a_checkout_that_is_or_holds_a_system_path_the_socket_or_the_runner_is_refused(
    path: str, env: dict[str, str]
) -> None:
    assert checkout_problem(path, env) == (
        "not / or a directory holding system paths, the engine's socket or the runner"
    )


# -- where things are --------------------------------------------------------------------------


def test_the_engine_sockets_are_docker_hosts_first_then_the_usual_then_the_users() -> None:
    assert engine_sockets({}) == ENGINE_SOCKETS
    env = {"DOCKER_HOST": "unix:///a/d.sock", "XDG_RUNTIME_DIR": "/run/user/7"}
    assert engine_sockets(env) == (
        "/a/d.sock", *ENGINE_SOCKETS, "/run/user/7/docker.sock", "/run/user/7/podman/podman.sock"
    )  # fmt: skip
    assert engine_sockets({"DOCKER_HOST": "tcp://h:2375", "XDG_RUNTIME_DIR": ""}) == ENGINE_SOCKETS


def test_the_runner_dirs_are_the_workspaces_parent_and_its_temp_and_tool_cache() -> None:
    env = {"RUNNER_WORKSPACE": "/r/_work/repo/", "RUNNER_TEMP": "/r/t", "RUNNER_TOOL_CACHE": "/r/c"}
    assert runner_dirs(env) == ("/r/_work", "/r/t", "/r/c")
    assert (
        runner_dirs({"RUNNER_WORKSPACE": "rel/x", "RUNNER_TEMP": "t", "RUNNER_TOOL_CACHE": ""})
        == ()
    )


def test_the_users_secrets_are_homes_credentials_docker_config_and_the_runners_directory() -> None:
    env = {"HOME": "/u", "DOCKER_CONFIG": "/dc", "RUNNER_WORKSPACE": "/r/_work/repo"}
    assert user_secrets(env) == (*(f"/u/{n}" for n in HOME_SECRETS), "/dc", "/r")
    assert ".docker" in HOME_SECRETS and ".ssh" in HOME_SECRETS


@pytest.mark.parametrize("home", ["/", "/.", "relative", ""])
def test_a_home_that_is_the_root_or_not_absolute_names_no_secrets(home: str) -> None:
    # "/" would make every path a credential directory's parent; a relative one means nothing
    assert user_secrets({"HOME": home, "DOCKER_CONFIG": "dc"}) == ()


def test_a_workspace_outside_a_work_directory_names_no_runner_directory() -> None:
    assert user_secrets({"RUNNER_WORKSPACE": "/r/work/repo"}) == ()
    assert user_secrets({"RUNNER_WORKSPACE": "r/_work/repo"}) == ()


# -- find_socket -------------------------------------------------------------------------------


def test_a_socket_itself_is_found(bound_socket: Path) -> None:
    assert find_socket(str(bound_socket)) == str(bound_socket)


def test_a_socket_deep_in_a_directory_is_found(bound_socket: Path, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "d" / "g").mkdir()
    assert find_socket(str(tmp_path)) == str(bound_socket)


def test_a_tree_without_sockets_and_a_missing_path_have_none(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "f").write_text("x")
    os.mkfifo(tmp_path / "a" / "fifo")
    assert find_socket(str(tmp_path)) is None
    assert find_socket(str(tmp_path / "missing")) is None


def test_a_link_to_a_socket_is_not_followed(bound_socket: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "link").symlink_to(bound_socket)
    (other / "dirlink").symlink_to(bound_socket.parent)
    assert find_socket(str(other)) is None


def test_the_scan_stops_after_its_limit_of_entries(bound_socket: Path) -> None:
    top = bound_socket.parent.parent  # d/: e/ (1 entry), then e/s (the 2nd)
    assert find_socket(str(top), limit=2) == str(bound_socket)
    assert find_socket(str(top), limit=1) is None
    assert find_socket(str(top), limit=0) is None


def test_an_unreadable_directory_is_skipped_and_the_scan_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # root reads every directory: the first subdirectory scanned stands in for one it cannot
    # (a socket in each, so the scan finds the other one whichever comes first)
    paths = [tmp_path / "a" / "s", tmp_path / "b" / "s"]
    socks = [socket.socket(socket.AF_UNIX) for _ in paths]
    for sock, path in zip(socks, paths, strict=True):
        path.parent.mkdir()
        sock.bind(str(path))
    real_scandir, calls = os.scandir, []

    def scandir(path: str):
        calls.append(path)
        if len(calls) == 2:
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    try:
        found = find_socket(str(tmp_path))
    finally:
        for sock in socks:
            sock.close()
    assert found is not None and found != calls[1] + "/s" and len(calls) == 3


def test_the_limit_counts_entries_over_the_whole_tree_not_per_directory(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(deep / "s"))
        assert find_socket(str(tmp_path), limit=4) == str(deep / "s")
        assert find_socket(str(tmp_path), limit=2) is None  # a, b seen: c is not scanned


def test_a_checkout_reached_through_a_link_keeps_its_files_in_even_under_home() -> None:
    links = {"/home/ci/link": "/home/ci/repo", "/home/ci/link/data": "/home/ci/repo/data"}
    assert problem("/home/ci/repo/data", checkout="/home/ci/link", links=links) is None
    assert problem("/home/ci/link/data", checkout="/home/ci/link", links=links) is None
