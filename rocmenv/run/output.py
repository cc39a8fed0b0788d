"""``--output DIR``: the one way a container's files reach the host when nothing of the host
is writable from it (an untrusted container sees a copy-on-write view of the checkout whose
writes go with it: :mod:`rocmenv.engine.overlay`).

The container writes into its output directory (the profile's ``output``, default
``/rocmenv-output``, named by ``$ROCMENV_OUTPUT`` inside): an empty volume of the engine's,
never a host path. After the command has exited — not after an interrupt — and before the
container is removed, rocmenv asks the engine for that directory as a tar stream
(``GET /containers/ID/archive``, ``docker|podman cp ID:DIR/. -``) and writes into ``DIR``:

* **regular files only**, at their relative paths (directories made as needed, 0755); links,
  hard links, device nodes, FIFOs and sockets are skipped and said;
* modes **0644 or 0755** (executable when any x bit was set): no set-id bits, no sticky bit,
  no file capabilities or other extended attributes, owned by whoever runs rocmenv;
* nothing named ``.git`` at any depth (a ``sub/.git`` with ``gitdir:`` would make the host's
  git read a config of the container's making), no name with a control character or ``..``;
* at most :data:`MAX_ENTRIES` entries and, untrusted, the policy's ``output-size`` in all
  (default 1 GiB): the copy stops there and says so;
* every write without following a link (:mod:`rocmenv.hostfs`): a file that exists is
  replaced, never written through. ``DIR`` is named by the trusted side (the command line),
  may lie inside the checkout (never inside its ``.git``), and is made when missing.

The transfer is read as it arrives (:class:`_ChunkReader`), never held whole in memory.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rocmenv.errors import UsageError
from rocmenv.escape import control_char, shown
from rocmenv.hostfs import LinkRefused, create_file, is_under, open_dir

TYPE_CHECKING = False  # typing's own, without importing typing (rocmenv.typecheck)
if TYPE_CHECKING:
    from typing import Final

    from rocmenv.engine.protocol import Engine

MAX_ENTRIES: Final = 100_000  # tar entries read (files, directories, skipped ones)
_COPY_CHUNK: Final = 1 << 20


@dataclass
class Copied:
    """What a copy wrote (host paths are ``dest`` + the relative names) and left out."""

    files: int = 0
    size: int = 0
    skipped: list[str] = field(default_factory=list)  # "name (why)"
    stopped: str | None = None  # why the copy ended early, if it did


def check_destination(dest: Path, checkout: Path | None) -> None:
    """A destination rocmenv may write: absolute, and not inside the checkout's ``.git``."""
    if not dest.is_absolute():
        raise UsageError(f"--output {dest}: not an absolute path")
    if checkout is not None:
        for root in {str(checkout), os.path.realpath(checkout)}:
            if is_under(os.path.normpath(dest), f"{root}/.git"):
                raise UsageError(
                    f"--output {dest} is inside the checkout's .git: refused",
                    hint="name a directory outside .git (e.g. $RUNNER_TEMP/results)",
                )


def copy_out(
    engine: Engine,
    container_id: str,
    source: str,
    dest: Path,
    *,
    checkout: Path | None,
    limit: int | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> Copied:
    """Copy the regular files under ``source`` in the container into ``dest`` (module
    docstring); ``limit``: the most bytes in all; ``stopped``: asked before each entry (a
    signal ends the copy)."""
    inside = checkout is not None and any(
        is_under(os.path.normpath(dest), root)
        for root in (str(checkout), os.path.realpath(checkout))
    )
    os.close(open_dir(dest, within=checkout if inside else None, create=True))
    within = checkout if inside and checkout is not None else dest
    out = Copied()
    chunks = engine.export(container_id, source.rstrip("/") + "/.")
    reader = _ChunkReader(chunks)
    try:
        with tarfile.open(fileobj=reader, mode="r|") as archive:
            for count, member in enumerate(archive, 1):
                if stopped():
                    out.stopped = "an interrupt"
                    break
                if count > MAX_ENTRIES:
                    out.stopped = f"{MAX_ENTRIES} entries"
                    break
                if limit is not None and member.isreg() and out.size + member.size > limit:
                    out.stopped = f"the size cap ({limit} bytes in all)"
                    break
                _entry(archive, member, dest, within, out)
    except tarfile.TarError as err:
        if reader.read_so_far:  # nothing at all: nothing at the path
            out.stopped = f"an archive from the engine that does not read ({err})"
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:  # ends the transfer (the engine's stream, the CLI)
            close()
    return out


def _entry(
    archive: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, within: Path, out: Copied
) -> None:
    """One entry of the stream: a directory made, a regular file written, the rest said."""
    parts = _relative(member.name)
    if parts is None:
        out.skipped.append(f"{shown(member.name)} (not a plain relative name)")
    elif not parts:
        return  # the directory itself
    elif any(p.casefold() == ".git" for p in parts):
        out.skipped.append(f"{'/'.join(parts)} (named .git)")
    elif member.isdir():
        _make_dir(dest, parts, within, out)
    elif not member.isreg():
        out.skipped.append(f"{'/'.join(parts)} ({_kind(member)})")
    else:
        _write(archive, member, dest, parts, within, out)


def _relative(name: str) -> tuple[str, ...] | None:
    """The entry's path below the copied directory (``./a/b``, ``/a/b`` and ``a/b`` alike);
    ``None`` for one with ``..`` or a control character."""
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts or control_char(name) is not None:
        return None
    return parts


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    if member.isdev():
        return "a device node or FIFO"
    return "not a regular file"


def _make_dir(dest: Path, parts: tuple[str, ...], within: Path, out: Copied) -> None:
    try:
        os.close(open_dir(dest.joinpath(*parts), within=within, create=True))
    except OSError as err:
        out.skipped.append(f"{'/'.join(parts)} ({err})")


def _write(
    archive: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, parts: tuple[str, ...],
    within: Path, out: Copied,
) -> None:  # fmt: skip
    mode = 0o755 if member.mode & 0o111 else 0o644
    target = dest.joinpath(*parts)
    try:
        fd = create_file(target, within=within, parents=True, mode=mode)
    except (LinkRefused, OSError) as err:
        out.skipped.append(f"{'/'.join(parts)} ({err})")
        return
    source = archive.extractfile(member)
    written = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)  # exactly: not what the umask left of it
            if source is not None:
                while data := source.read(_COPY_CHUNK):
                    fh.write(data)
                    written += len(data)
    except BaseException as err:  # no half file stays: the disk, the stream, an interrupt
        _remove(target, within)
        if not isinstance(err, OSError):
            raise
        out.skipped.append(f"{'/'.join(parts)} ({err.strerror or err})")
        return
    out.files += 1
    out.size += written


def _remove(target: Path, within: Path) -> None:
    try:
        dir_fd = open_dir(target.parent, within=within)
    except OSError:
        return
    try:
        os.unlink(target.name, dir_fd=dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


class _ChunkReader(io.RawIOBase):
    """The engine's chunks as a file ``tarfile`` reads in stream mode."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._left = b""
        self.read_so_far = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._left))
        self.read_so_far += size
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size


def summary(copied: Copied, dest: Path) -> tuple[str, list[str]]:
    """The note of a copy, and its warnings (skipped entries; an early stop)."""
    note = f"output: {copied.files} file(s), {copied.size} bytes copied to {dest}"
    warnings = []
    if copied.skipped:
        names = ", ".join(shown(s) for s in copied.skipped[:5])
        more = f" (and {len(copied.skipped) - 5} more)" if len(copied.skipped) > 5 else ""
        warnings.append(
            f"output: left out {len(copied.skipped)} entr(ies) that are not regular files or "
            f"may not be written: {names}{more}"
        )
    if copied.stopped:
        warnings.append(f"output: the copy stopped at {copied.stopped}: {dest} is incomplete")
    return note, warnings
