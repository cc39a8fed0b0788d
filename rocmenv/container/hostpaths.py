"""Host paths an untrusted container may not mount — the second line behind the guard's
allowlist (:mod:`rocmenv.container.guard`: a profile's data mounts only under sources the trusted
side declared): system directories, engine state, logs and backups, sockets (``*.sock``,
anything that is a socket, a directory with one among its first :data:`SOCKET_SCAN_LIMIT`
entries, anything holding the engine's socket), directories holding the checkout, the CI
runner's work directories outside the checkout and its own directory, and the credentials
in ``$HOME`` and ``$DOCKER_CONFIG``. Sources are compared both as written and with symlinks
resolved (a link in the checkout does not help). A denylist always has gaps (a socket past
the scan limit, a file nobody listed): that is why the allowlist comes first.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping

from rocmenv.hostfs import is_under

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Final

FORBIDDEN_ROOTS: Final = (
    "/proc", "/sys", "/dev", "/etc", "/root", "/home", "/run", "/var/run", "/boot",
    "/var/lib/docker", "/var/lib/containers", "/var/lib/kubelet", "/var/backups", "/var/log",
    "/var/mail", "/var/spool",
)  # fmt: skip
# Credentials in the invoking user's home, wherever HOME is (a CI user's is often not /home).
HOME_SECRETS: Final = (
    ".docker", ".ssh", ".aws", ".kube", ".gnupg", ".config", ".netrc", ".git-credentials",
    ".pypirc", ".local/share/rocmenv",
)  # fmt: skip
FORBIDDEN_EXACT: Final = ("/", "/tmp", "/var/tmp", "/var", "/var/lib", "/usr", "/lib", "/bin")
SOCKET_SCAN_LIMIT: Final = 10_000  # entries of a mounted directory searched for sockets
ENGINE_SOCKETS: Final = ("/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock")


def mount_problem(
    source: str,
    checkout: str | None,
    env: Mapping[str, str],
    realpath: Callable[[str], str],
    find_socket: Callable[[str], str | None],
) -> str | None:
    """Why a data mount of ``source`` is refused in untrusted mode (``None``: it is not)."""
    real = realpath(source)
    paths = {os.path.normpath(source), real}
    if checkout is not None:
        real_checkout = realpath(checkout)
        if all(is_under(p, real_checkout) or is_under(p, checkout) for p in paths):
            return None  # inside the checkout: the job's own files (read-only)
    for path in paths:
        problem = _path_problem(path, checkout, env, realpath, find_socket)
        if problem is not None:
            return problem
    return None


def _path_problem(
    path: str,
    checkout: str | None,
    env: Mapping[str, str],
    realpath: Callable[[str], str],
    find_socket: Callable[[str], str | None],
) -> str | None:
    """Why ``path`` (a mount's source as written, or resolved) is refused: the first rule it
    breaks, sockets first."""
    if path.endswith(".sock"):
        return "no sockets"
    sock = find_socket(path)
    if sock is not None:
        return "no sockets" + (f" ({sock} is one)" if sock != path else "")
    for sock in engine_sockets(env):
        if is_under(sock, path):
            return f"no mount of the engine's socket {sock} or a directory holding it"
    if path in FORBIDDEN_EXACT:
        return "not the host's root or a system directory"
    for root in FORBIDDEN_ROOTS:
        if is_under(path, root) or is_under(root, path):
            return f"nothing of {root}"
    if checkout is not None and (is_under(checkout, path) or is_under(realpath(checkout), path)):
        return "no directory containing the checkout"
    for work in runner_dirs(env):
        if is_under(path, work) or is_under(work, path):
            return f"nothing of the runner's work directory {work} outside the checkout"
    for secret in user_secrets(env):
        if is_under(path, secret) or is_under(secret, path):
            return f"nothing of the credentials in {secret} (or a directory holding them)"
    return None


def checkout_problem(path: str, env: Mapping[str, str]) -> str | None:
    """The checkout is mounted (as a copy-on-write view): it may lie in ``/home`` (runners do), but must not
    be ``/``, a system directory, or hold one, the engine's socket or the runner's work
    directories (run from the checkout, not from above it)."""
    holds = [*FORBIDDEN_ROOTS, *engine_sockets(env), *runner_dirs(env)]
    if path in FORBIDDEN_EXACT or any(is_under(p, path) for p in holds):
        return "not / or a directory holding system paths, the engine's socket or the runner"
    return None


def engine_sockets(env: Mapping[str, str]) -> tuple[str, ...]:
    """The engine's socket path(s): ``DOCKER_HOST=unix://…`` and the usual places."""
    found = list(ENGINE_SOCKETS)
    # pragma: another default is no more a unix:// URL than "" (an equivalent mutant)
    host = env.get("DOCKER_HOST", "")  # pragma: no mutate
    if host.startswith("unix://"):
        found.insert(0, host[len("unix://") :])
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        found += [f"{runtime}/docker.sock", f"{runtime}/podman/podman.sock"]
    return tuple(found)


def runner_dirs(env: Mapping[str, str]) -> tuple[str, ...]:
    """The CI runner's work directories (GitHub Actions names them in the environment)."""
    # pragma: another default is no more absolute than "" (equivalent mutants)
    out = []
    if env.get("RUNNER_WORKSPACE", "").startswith("/"):  # pragma: no mutate
        out.append(os.path.dirname(os.path.normpath(env["RUNNER_WORKSPACE"])))
    for name in ("RUNNER_TEMP", "RUNNER_TOOL_CACHE"):
        if env.get(name, "").startswith("/"):  # pragma: no mutate
            out.append(env[name])
    return tuple(out)


def user_secrets(env: Mapping[str, str]) -> tuple[str, ...]:
    """Where the invoking user's and the runner's credentials live: ``$HOME``'s credential
    directories, ``$DOCKER_CONFIG``, and the runner's own directory (``RUNNER_WORKSPACE`` is
    ``<runner>/_work/<repo>``: ``<runner>`` holds ``.credentials``)."""
    # Equivalent mutants (pragma): another default that is not absolute either; `out =` for
    # `out +=` on the empty list.
    out = []
    home = env.get("HOME", "")  # pragma: no mutate
    if home.startswith("/") and os.path.normpath(home) != "/":
        out += [os.path.join(home, name) for name in HOME_SECRETS]  # pragma: no mutate
    if env.get("DOCKER_CONFIG", "").startswith("/"):  # pragma: no mutate
        out.append(env["DOCKER_CONFIG"])
    workspace = env.get("RUNNER_WORKSPACE", "")  # pragma: no mutate
    if workspace.startswith("/"):
        work = os.path.dirname(os.path.normpath(workspace))
        if os.path.basename(work) == "_work":
            out.append(os.path.dirname(work))
    return tuple(out)


def find_socket(path: str, limit: int = SOCKET_SCAN_LIMIT) -> str | None:
    """``path`` if it is a socket, else a socket among the first ``limit`` entries of the
    directory tree under it (a read-only bind of a socket still accepts ``connect()``).
    Symlinks are not followed: inside the container they resolve in the container."""
    try:
        if stat.S_ISSOCK(os.stat(path).st_mode):
            return path
    except OSError:
        return None
    # Equivalent mutants (pragma): follow_symlinks=None reads as False; and following links
    # in is_file/stat changes nothing, links are excluded by is_symlink() first.
    stack, seen = [path], 0
    while stack and seen < limit:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):  # pragma: no mutate
                        stack.append(entry.path)
                    elif (
                        not entry.is_file(follow_symlinks=False)  # pragma: no mutate
                        and not entry.is_symlink()
                        and _is_socket(entry)
                    ):
                        return entry.path
        except OSError:
            continue
    return None


def _is_socket(entry: os.DirEntry[str]) -> bool:
    info = entry.stat(follow_symlinks=False)  # pragma: no mutate  (see find_socket)
    return stat.S_ISSOCK(info.st_mode)
