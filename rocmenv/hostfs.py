"""Paths and files on the host.

:func:`is_under` compares host paths (normalised, no symlinks followed). Files rocmenv writes,
written atomically: a temp file beside the target (created 0600 by
``mkstemp``), written, flushed and fsynced, given its mode, then renamed over the target, and
the directory fsynced. A crash or ``kill -9`` leaves the old file or the new one, never half.
Used by the lockfile, the suite history and reports, the pull record, the layer index, the
bootstrap report and the token cache.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(
    path: Path,
    text: str,
    *,
    mode: int | None = None,
    durable: bool = True,
    check: Callable[[Path], None] | None = None,
) -> None:
    """Replace ``path`` with ``text``. ``mode``: the file's permissions (default: the old
    file's, else 0644). ``durable``: fsync the file and its directory (off for caches).
    ``check``: called with the written temp file before it replaces ``path``; what it raises
    leaves ``path`` untouched (``rocmenv init`` loads the new project file through it)."""
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        if check is not None:
            check(Path(tmp))
        if mode is None:
            mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        with contextlib.suppress(OSError):
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def append_text(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` in one write (created 0644 when missing), never through a
    symbolic link (``O_NOFOLLOW``): files a runner hands over, such as ``$GITHUB_OUTPUT``."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def is_under(path: str, root: str) -> bool:
    """``path`` is ``root`` or inside it (both absolute, compared as normalised paths)."""
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")
