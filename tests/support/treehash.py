"""A directory tree as one comparable value: every entry's type, mode, owner, size, times,
device number, extended attribute names and content (a link's target), walked without
following a link. Two snapshots of a checkout are equal when nothing in it changed — a
byte, a mode, an owner, a node, a link, a file in ``.git``."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

Entry = tuple[object, ...]


def snapshot(root: Path) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for path in [root, *_walk(root)]:
        st = os.lstat(path)
        mode = st.st_mode
        if stat.S_ISREG(mode):
            content: object = hashlib.sha256(path.read_bytes()).hexdigest()
        elif stat.S_ISLNK(mode):
            content = os.readlink(path)
        else:
            content = None
        try:
            xattrs = tuple(sorted(os.listxattr(path, follow_symlinks=False)))
        except OSError:
            xattrs = ()
        out[str(path.relative_to(root))] = (
            mode, st.st_uid, st.st_gid, st.st_size if not stat.S_ISDIR(mode) else None,
            st.st_mtime_ns, st.st_rdev, xattrs, content,
        )  # fmt: skip
    return out


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        found += [base / name for name in sorted(dirnames)]
        found += [base / name for name in sorted(filenames)]
    return found


def differences(before: dict[str, Entry], after: dict[str, Entry]) -> list[str]:
    """What changed, for an assertion message."""
    out = [f"new: {p}" for p in sorted(after.keys() - before.keys())]
    out += [f"gone: {p}" for p in sorted(before.keys() - after.keys())]
    out += [f"changed: {p}" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]]
    return out
