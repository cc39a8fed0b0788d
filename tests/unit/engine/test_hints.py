"""Each cause of an unreachable engine gets its own hint (rocmenv.engine.hints), from the
texts the adapters really see (the socket's error through either transport, the docker
CLI's stderr). The same against real sockets and a real non-root user:
tests/integration/cli/test_doctor.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmenv.engine.hints import cli_unreachable, unreachable_hint
from rocmenv.engine.select import START_HINT

CONTEXT = ('Failed to initialize: unable to resolve docker endpoint: context "nosuch": context '
           "not found: open /root/.docker/contexts/meta/9e62/meta.json: no such file or directory")  # fmt: skip
DENIED_CLI = ("permission denied while trying to connect to the Docker daemon socket at "
              'unix:///var/run/docker.sock: Get "http://%2Fvar%2Frun%2Fdocker.sock/v1.24/info": '
              "dial unix /var/run/docker.sock: connect: permission denied")  # fmt: skip
DENIED_API = "unix:///var/run/docker.sock: Permission denied"
DENIED_PY = (
    "unix:///var/run/docker.sock: ('Connection aborted.', PermissionError(13, 'Permission denied'))"
)
REFUSED_API = "unix:///run/dead.sock: Connection refused"
MISSING_API = "unix:///run/nosock: No such file or directory"


@pytest.mark.parametrize("text", [CONTEXT])
def test_a_missing_cli_context_says_how_to_list_and_reset_contexts(text: str) -> None:
    hint = unreachable_hint(text, {"DOCKER_CONTEXT": "nosuch"})
    assert "'nosuch'" in hint and "docker context ls" in hint and "DOCKER_CONTEXT" in hint
    assert cli_unreachable(text)


@pytest.mark.parametrize("text", [DENIED_CLI, DENIED_API, DENIED_PY])
def test_permission_denied_on_the_socket_names_the_group_root_or_rootless(text: str) -> None:
    hint = unreachable_hint(text, {})
    assert "/var/run/docker.sock" in hint and "docker` group" in hint and "rootless" in hint


def test_a_refused_socket_says_the_daemon_is_stopped(tmp_path: Path) -> None:
    assert "nothing listens" in unreachable_hint(REFUSED_API, {})
    dead = tmp_path / "dead.sock"
    dead.touch()  # the CLI says the same for a missing and a refused socket: look at it
    cli = f"Cannot connect to the Docker daemon at unix://{dead}. Is the docker daemon running?"
    assert "nothing listens" in unreachable_hint(cli, {})
    missing = cli.replace(str(dead), str(tmp_path / "none.sock"))
    assert unreachable_hint(missing, {}) == START_HINT


def test_no_socket_at_all_is_the_start_hint() -> None:
    assert unreachable_hint(MISSING_API, {}) == START_HINT


def test_an_engine_refusing_something_is_not_unreachable() -> None:
    assert not cli_unreachable("Error response from daemon: No such container: abc")
