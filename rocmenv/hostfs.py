"""Paths and files on the host: every write rocmenv makes, made so that no symbolic link a
checkout planted is followed.

**Where links are not followed.** A checkout is the pull request's: its committed files, and
after a trusted run whatever its containers left in it (it is mounted writable then; an
untrusted container sees a copy-on-write view). So a path inside
``within`` (the checkout: :attr:`rocmenv.context.Context.checkout`) is walked from ``within``
one component at a time, each directory opened with ``O_NOFOLLOW`` relative to the one
before (``openat``) and a missing one created with ``mkdirat`` (which never follows a link
either); a link, or anything that is not a directory where one is needed, is refused with
:class:`LinkRefused`. A path outside ``within`` is the runner's: its existing directories
are opened as the host resolves them, and only the directories rocmenv creates below them
are walked without links. ``..`` is resolved lexically first (a link never decides where
it leads). The last component is never followed, in any case:

* :func:`write_atomic` replaces a file: a temp file created ``O_EXCL`` beside it (0600),
  written, flushed and fsynced, given its mode, then ``renameat`` over the name (which
  replaces a link there, never its target), and the directory fsynced. A crash or
  ``kill -9`` leaves the old file or the new one, never half.
* :func:`create_file` makes a new file (a per-test log): an old entry of that name is
  unlinked (a link goes, not its target), then the file is created ``O_EXCL|O_NOFOLLOW``.
* :func:`open_append` appends (``--markdown``, ``$GITHUB_STEP_SUMMARY``, ``$GITHUB_ENV``)
  only to a regular file with one link, opened ``O_NOFOLLOW|O_NONBLOCK`` (a planted FIFO
  cannot hang the writer).
* :func:`open_dir` is the walk itself (the lockfile's directory lock uses it).

Used by the lockfile, the suite's logs, history and reports, the pull record, the layer
index, the bootstrap report and exports, the launcher cache and the token cache.
:func:`is_under` compares host paths (normalised, no symlinks followed).

This module imports nothing of rocmenv (it is the foundation): callers turn
:class:`LinkRefused` (an ``OSError``) into their own error with a hint.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NOFOLLOW_DIR = _DIR_FLAGS | os.O_NOFOLLOW


class LinkRefused(OSError):
    """A write that would follow a symbolic link (or meet something that is not a directory
    or regular file) where a checkout could have planted it."""

    def __init__(self, what: str, path: str) -> None:
        super().__init__(errno.ELOOP, what, path)
        self.what = what

    def __str__(self) -> str:
        return self.what


def open_dir(path: Path, *, within: Path | None, create: bool = False, mode: int = 0o755) -> int:
    """A descriptor of directory ``path`` (absolute), reached without following a link
    inside ``within`` nor in any directory made here (``create``: missing ones are made with
    ``mode``). The caller closes it."""
    base, parts = _walk_from(Path(path), within)
    fd = os.open(base, _DIR_FLAGS)
    try:
        shown = Path(base)
        for name in parts:
            shown = shown / name
            child = _child_dir(fd, name, shown, create=create, mode=mode)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_atomic(
    path: Path,
    text: str,
    *,
    within: Path | None = None,
    mode: int | None = None,
    durable: bool = True,
    parents: bool = False,
    dir_mode: int = 0o755,
    check: Callable[[Path], None] | None = None,
) -> None:
    """Replace ``path`` with ``text``. ``mode``: the file's permissions (default: the old
    file's, else 0644). ``durable``: fsync the file and its directory (off for caches).
    ``parents``: make missing directories (``dir_mode``). ``within``: see the module
    docstring (``None``: the caller vouches that no checkout shapes the path). ``check``:
    called with the written temp file before it replaces ``path``; what it raises leaves
    ``path`` untouched (``rocmenv init`` loads the new project file through it)."""
    path = Path(path)
    dir_fd = open_dir(path.parent, within=within, create=parents, mode=dir_mode)
    try:
        name = _name(path)
        tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)  # fmt: skip
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                if durable:
                    os.fsync(fh.fileno())
                os.fchmod(fh.fileno(), _old_mode(dir_fd, name) if mode is None else mode)
            if check is not None:
                check(path.parent / tmp)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        if durable:
            with contextlib.suppress(OSError):
                os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def create_file(
    path: Path, *, within: Path | None, parents: bool = False, mode: int = 0o644
) -> int:
    """A new, empty file at ``path`` open for writing (a descriptor the caller closes): an
    old entry of that name (file or link) is removed first, never what a link points to."""
    path = Path(path)
    dir_fd = open_dir(path.parent, within=within, create=parents)
    try:
        name = _name(path)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                raise LinkRefused(f"{path} is a directory, not a file rocmenv may replace",
                                  str(path))  # fmt: skip
            os.unlink(name, dir_fd=dir_fd)
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                           | os.O_CLOEXEC, mode, dir_fd=dir_fd)  # fmt: skip
        except FileExistsError:
            raise LinkRefused(f"{path} reappeared while rocmenv was creating it (something "
                              "else writes there): refused", str(path)) from None  # fmt: skip
    finally:
        os.close(dir_fd)


def open_append(
    path: Path, *, within: Path | None, parents: bool = False, mode: int = 0o644
) -> int:
    """A descriptor appending to ``path`` (created when absent): refused unless it is a
    regular file with one link (not a link, FIFO, device or another file's second name)."""
    path = Path(path)
    dir_fd = open_dir(path.parent, within=within, create=parents)
    try:
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_NOCTTY | os.O_CLOEXEC)  # fmt: skip
        try:
            fd = os.open(_name(path), flags, mode, dir_fd=dir_fd)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise _refused(dir_fd, _name(path), path) from None
            raise
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        kind = "has other hard links" if stat.S_ISREG(st.st_mode) else "is not a regular file"
        raise LinkRefused(f"{path} {kind}: rocmenv does not append to it", str(path))
    os.set_blocking(fd, True)
    return fd


def append_text(path: Path, text: str, *, within: Path | None = None) -> None:
    """Append ``text`` to ``path`` in one write (created 0644 when missing) through
    :func:`open_append`: files a runner hands over, such as ``$GITHUB_OUTPUT``."""
    with os.fdopen(open_append(path, within=within), "w", encoding="utf-8") as fh:
        fh.write(text)


def is_under(path: str, root: str) -> bool:
    """``path`` is ``root`` or inside it (both absolute, compared as normalised paths)."""
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def lexical(path: Path) -> Path:
    """``path`` (absolute) normalised without asking the file system: ``..`` and ``.``
    resolved as text, ``//`` (which POSIX ``normpath`` keeps at the start) collapsed."""
    if not path.is_absolute():
        raise ValueError(f"{path} is not an absolute path")
    text = os.path.normpath(str(path))
    return Path("/" + text.lstrip("/"))


# -- the walk ----------------------------------------------------------------------------------


def _walk_from(path: Path, within: Path | None) -> tuple[str, list[str]]:
    """Where the walk starts (opened as the host resolves it) and the names below it."""
    target = lexical(path)
    if within is not None:
        for root in dict.fromkeys((lexical(within), Path(os.path.realpath(within)))):
            if is_under(str(target), str(root)):
                return str(root), list(target.relative_to(root).parts)
    base, missing = target, []
    while not os.path.isdir(base) and base != base.parent:
        missing.append(base.name)
        base = base.parent
    return str(base), missing[::-1]


def _child_dir(dir_fd: int, name: str, shown: Path, *, create: bool, mode: int) -> int:
    try:
        return os.open(name, _NOFOLLOW_DIR, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refused(dir_fd, name, shown) from None
        raise
    with contextlib.suppress(FileExistsError):  # made meanwhile: opened without links below
        os.mkdir(name, mode, dir_fd=dir_fd)
    try:
        return os.open(name, _NOFOLLOW_DIR, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refused(dir_fd, name, shown) from None
        raise


def _refused(dir_fd: int, name: str, shown: Path) -> LinkRefused:
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return LinkRefused(f"{shown} is not a directory or regular file rocmenv may write",
                           str(shown))  # fmt: skip
    return LinkRefused(
        f"{shown} is a symbolic link (to {target}): rocmenv does not write through links a "
        "checkout can plant", str(shown),
    )  # fmt: skip


def _name(path: Path) -> str:
    name = path.name
    if name in ("", ".", ".."):
        raise ValueError(f"{path} names no file")
    return name


def _old_mode(dir_fd: int, name: str) -> int:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return 0o644
    return st.st_mode & 0o777 if stat.S_ISREG(st.st_mode) else 0o644
