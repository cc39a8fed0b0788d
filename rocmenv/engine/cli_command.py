"""One command of the engine's CLI (``docker`` or ``podman``), run to its end: its output,
or :class:`CliError` with the command, its exit status and its stderr. The CLI adapter
(:mod:`rocmenv.engine.cli_engine`) and its volume calls (:mod:`rocmenv.engine.volumes`)
run every short command through :func:`run_command`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rocmenv.errors import EngineUnavailable

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:  # subprocess brings selectors and signal: not on the docker-api run path
    import subprocess


class CliError(Exception):
    """A CLI command that failed: the command, its exit status and its stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        super().__init__(f"`{' '.join(argv[:3])} …` exited {returncode}: {stderr}")
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr


def run_command(
    argv: Sequence[str], env: Mapping[str, str], timeout: float | None, *, kind: str
) -> subprocess.CompletedProcess[bytes]:
    """``argv`` with its stdout and stderr as bytes; :class:`CliError` unless it exits 0. In
    a session of its own: a terminal's Ctrl-C reaches rocmenv alone, which decides (a
    ``docker create`` cut short by it could leave a container nobody knows of)."""
    import subprocess

    try:
        done = subprocess.run(
            list(argv), env=dict(env), capture_output=True, timeout=timeout, check=False,
            start_new_session=True,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise CliError(argv, -1, f"timed out after {timeout} s") from None
    except OSError as err:
        raise EngineUnavailable(f"{kind}: cannot run {argv[0]}: {err}") from None
    if done.returncode != 0:
        raise CliError(argv, done.returncode, done.stderr.decode(errors="replace").strip())
    return done
