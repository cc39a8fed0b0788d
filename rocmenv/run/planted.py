"""What an untrusted container may not leave behind on the host — the **second line**
(docs/security.md "Running untrusted code").

The first line is structural: an untrusted container has no writable host path at all. It
sees the checkout through a copy-on-write view whose writes go with the container
(:mod:`rocmenv.engine.overlay`), its data mounts are read-only, and its results leave only
through ``--output`` as regular files of modes 0644/0755 (:mod:`rocmenv.run.output`). So
nothing it plants — a setuid shell, a device node, a link, a ``sub/.git`` with
``core.fsmonitor`` — is in the host's checkout to be honoured.

This sweep stays as a second line, in case a writable path ever reached an untrusted
container (a future mount kind, a mistake in an adapter): after the container is gone —
also when the run was interrupted — :func:`sweep_after` walks every host directory the
container could write and, as a second line, the checkout under its copy-on-write view,
and leaves nothing the host would honour:

* a **setuid or setgid** regular file loses those bits (a ``cp /bin/sh s; chmod 4755 s``
  would otherwise give every host user a root shell);
* a **file capability** (``security.capability``) is removed (a policy may allow SETFCAP);
* a **device node** is removed (``mknod b b 7 0; chmod 666 b`` is the host's loop device,
  world-writable; a policy may allow MKNOD).

Root in the container is root on the host (Docker runs no user namespace per container),
and mount flags do not help: ``nosuid``/``nodev`` on the container's view leave a planted
file itself setuid-root on the host's own mount. The guard drops ``MKNOD``, ``SETFCAP`` and
``FSETID`` too (:mod:`rocmenv.container.guard`).

The walk never follows a link: each directory is opened with ``O_NOFOLLOW`` relative to its
parent (other tests of a suite may still be running in the same checkout and swap a
directory for a link meanwhile), files are changed through a descriptor opened
``O_NOFOLLOW`` and checked to be the entry that was looked at, nodes are unlinked by name in
their directory. It covers the whole directory, not only what this run made. Directories
nested deeper than :data:`MAX_DEPTH` are not walked: they are made root's alone (``0700``,
owner root), so no other user reaches what is inside. Read-only sub-mounts are skipped.

Cost: one ``lstat`` per entry (``benchmarks/bench_sweep.py``).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from rocmenv.container.runspec import RunSpec
from rocmenv.hostfs import is_under

MAX_DEPTH = 128  # directories below the mount's root walked (one descriptor per level)
SET_ID = stat.S_ISUID | stat.S_ISGID
CAPABILITY_XATTR = "security.capability"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Reporter(Protocol):
    def warning(self, text: str) -> None: ...


@dataclass
class Swept:
    """What a sweep changed (host paths), and what it could not."""

    stripped: list[str] = field(default_factory=list)  # setuid/setgid bits cleared
    uncapped: list[str] = field(default_factory=list)  # file capabilities removed
    removed: list[str] = field(default_factory=list)  # device nodes removed
    fenced: list[str] = field(default_factory=list)  # too deep: made root's alone
    failed: list[str] = field(default_factory=list)  # "path: why"

    @property
    def changed(self) -> bool:
        return bool(self.stripped or self.uncapped or self.removed or self.fenced)


def writable_sources(spec: RunSpec) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each host directory the container could write (writable bind mounts' sources) and
    each it sees copy-on-write (an overlay's lower directory: the second line), with the
    read-only mounts nested in it, which it could not write."""
    readonly = [m.source for m in spec.mounts if m.readonly and m.kind == "bind"]
    for mount in spec.mounts:
        if (mount.host_writable or mount.kind == "overlay") and mount.origin != "launcher":
            yield mount.source, tuple(r for r in readonly if is_under(r, mount.source))


def sweep_after(spec: RunSpec, reporter: Reporter) -> Swept | None:
    """After an untrusted container is gone: :func:`sweep` its writable mounts and say what
    was neutralised (or could not be). Nothing for a trusted run."""
    if not spec.untrusted:
        return None
    total = Swept()
    # without SETFCAP nothing in the container could set a file capability: not looked for
    caps = "SETFCAP" not in {c.upper().removeprefix("CAP_") for c in spec.cap_drop}
    for source, skip in writable_sources(spec):
        done = sweep(source, skip=skip, file_caps=caps)
        for name in ("stripped", "uncapped", "removed", "fenced", "failed"):
            getattr(total, name).extend(getattr(done, name))
    if total.changed:
        reporter.warning(_summary(total))
    if total.failed:
        reporter.warning(
            "untrusted mode: could not neutralise what the container left: "
            + "; ".join(total.failed[:5])
            + (f" (and {len(total.failed) - 5} more)" if len(total.failed) > 5 else "")
            + " — remove these as root before anything else runs from the checkout"
        )
    return total


def sweep(root: str, *, skip: Collection[str] = (), file_caps: bool = True) -> Swept:
    """Strip set-id bits and (``file_caps``) file capabilities, remove device nodes, under
    ``root`` (a host path rocmenv mounted; opened as the host resolves it, nothing below it
    followed)."""
    out = Swept()
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        out.failed.append(f"{root}: {err.strerror}")
        return out
    try:
        _walk(fd, root.rstrip("/") or "/", 0, _Walk(frozenset(skip), file_caps, out))
    finally:
        os.close(fd)
    return out


@dataclass(frozen=True)
class _Walk:
    skip: frozenset[str]
    file_caps: bool
    out: Swept


def _walk(dir_fd: int, shown: str, depth: int, walk: _Walk) -> None:
    subdirs: list[str] = []
    try:
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                    else:  # a link's own lstat: neither a node nor a regular file
                        _neutralise(dir_fd, entry.name, entry.stat(follow_symlinks=False),
                                    f"{shown}/{entry.name}", walk)  # fmt: skip
                except FileNotFoundError:
                    continue  # gone meanwhile
    except OSError as err:
        walk.out.failed.append(f"{shown}: {err.strerror}")
        return
    for name in subdirs:
        path = f"{shown}/{name}"
        if path in walk.skip:
            continue
        if depth >= MAX_DEPTH:
            _fence(dir_fd, name, path, walk.out)
            continue
        try:
            child = os.open(name, _DIR, dir_fd=dir_fd)
        except FileNotFoundError:
            continue
        except OSError as err:  # swapped for a link meanwhile: not followed, not ours to walk
            walk.out.failed.append(f"{path}: {err.strerror}")
            continue
        try:
            _walk(child, path, depth + 1, walk)
        finally:
            os.close(child)


def _neutralise(dir_fd: int, name: str, st: os.stat_result, path: str, walk: _Walk) -> None:
    out = walk.out
    mode = st.st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        try:
            os.unlink(name, dir_fd=dir_fd)
            out.removed.append(path)
        except FileNotFoundError:
            pass
        except OSError as err:
            out.failed.append(f"{path} (device node): {err.strerror}")
        return
    if not stat.S_ISREG(mode):
        return
    # any regular file, executable or not: chmod keeps the attribute, so a host user given a
    # capped 0644 file could make it cap_setuid+ep by making it executable
    capped = walk.file_caps and _has_capability(dir_fd, name)
    if not (mode & SET_ID or capped):
        return
    try:
        fd = os.open(name, _FILE, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as err:
        out.failed.append(f"{path}: {err.strerror}")
        return
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            return  # replaced meanwhile: what replaced it is looked at by its own run's sweep
        if now.st_mode & SET_ID:
            os.fchmod(fd, stat.S_IMODE(now.st_mode) & ~SET_ID)
            out.stripped.append(path)
        if capped:
            with contextlib.suppress(OSError):  # ENODATA: gone meanwhile
                os.removexattr(fd, CAPABILITY_XATTR)
                out.uncapped.append(path)
    except OSError as err:
        out.failed.append(f"{path}: {err.strerror}")
    finally:
        os.close(fd)


def _has_capability(dir_fd: int, name: str) -> bool:
    try:
        os.getxattr(f"/proc/self/fd/{dir_fd}/{name}", CAPABILITY_XATTR, follow_symlinks=False)
    except OSError:
        return False
    return True


def _fence(dir_fd: int, name: str, path: str, out: Swept) -> None:
    """Too deep to walk: root's alone, so no other user reaches what is inside."""
    try:
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    except OSError:
        return
    try:
        os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o700)
        out.fenced.append(path)
    except OSError as err:
        out.failed.append(f"{path} (nested deeper than {MAX_DEPTH}): {err.strerror}")
    finally:
        os.close(fd)


def _summary(swept: Swept) -> str:
    parts = []
    if swept.removed:
        parts.append(f"removed {len(swept.removed)} device node(s)")
    if swept.stripped:
        parts.append(f"cleared setuid/setgid on {len(swept.stripped)} file(s)")
    if swept.uncapped:
        parts.append(f"removed file capabilities from {len(swept.uncapped)} file(s)")
    if swept.fenced:
        parts.append(f"made {len(swept.fenced)} too deeply nested director(ies) root's alone")
    shown = [*swept.removed, *swept.stripped, *swept.uncapped, *swept.fenced]
    more = f" (and {len(shown) - 5} more)" if len(shown) > 5 else ""
    return (
        "untrusted mode: the container left what the host would honour; "
        + ", ".join(parts)
        + ": "
        + ", ".join(shown[:5])
        + more
    )
