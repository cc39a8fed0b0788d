"""One layer, read once: stream it, decompress it, walk its tar, keep the little that matters.

Media types: Docker and OCI gzip (``…tar.gzip``, ``…tar+gzip``), OCI zstd (``…tar+zstd``,
through the ``zstandard`` package of the ``rocmenv[zstd]`` extra — the standard library has
zstd only from Python 3.14; without it such a layer is a :class:`ConfigError` naming it) and
uncompressed tars (``…tar``, ``…diff.tar``). The stream is never written to disk: the tar is
read in ``r|`` (stream) mode and only these are kept, as a :class:`LayerIndexJson`:

- ``*.dist-info/METADATA``, ``*.egg-info/PKG-INFO`` and single-file ``*.egg-info``: their
  ``Name`` and ``Version`` headers only;
- ``opt/rocm*/.info/version`` (and the ``/opt/rocm`` symlink), ``etc/os-release`` / ``usr/lib/os-release``, ``pyvenv.cfg``;
- the Python versions present: ``lib/pythonX.Y/os.py``, ``bin/python*`` (files and
  symlinks), the ``python3.X-minimal`` stanzas of ``var/lib/dpkg/status`` and the
  ``PY_VERSION`` of ``include/pythonX.Y/patchlevel.h`` (for the patch level);
- the source files of the shims' target modules, and the ``__init__.py`` of their top-level
  packages (where the import system would find them); ``*.pth`` files and the ``MAPPING`` of
  setuptools' editable finders in site directories (editable installs);
- whiteouts (``.wh.<name>``) and opaque-directory markers (``.wh..wh..opq``).

A layer is hostile until read, so the walk is bounded (:mod:`rocmenv.contents.budget`): every
read of decompressed data is counted against the layer's and the image's limits and the
command's deadline, every kept byte against the index limit; extended tar headers (PAX, GNU
long names) over 1 MiB are refused, as Go's ``archive/tar`` refuses them; ``tarfile``'s
stream mode forgets each header once it is walked.

gzip is read by :class:`_Gunzip`, hand-written on :mod:`zlib` (rule 11): the standard
library's :class:`gzip.GzipFile` is as safe (each call inflates at most what was asked) but
measured ~10 % slower on a 1 GB layer of real files (``benchmarks/bench_layer.py``, 211 vs
231 MB/s at load 2–4: it feeds zlib 8 KiB at a time and computes the CRC a second time in
Python), which a cold ``inspect`` of a large image would pay. It passes the same checks
(``tests/unit/contents/test_layer.py``: what ``gzip.decompress`` reads, several members,
truncated and corrupt streams, a bomb read in bounded pieces). The reader it replaced
inflated a whole 1 MiB input at once (1 GiB, for zeros) and re-sliced its buffer on every
read: ~1 MiB/s and 2.1 GB RSS on a gzip bomb.
"""

from __future__ import annotations

import io
import re
import tarfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, TypedDict, cast

from rocmenv.contents.budget import Budget
from rocmenv.errors import ConfigError, RegistryProtocolError
from rocmenv.settings.registry import RegistrySettings

INDEX_VERSION = 2  # bump whenever what is kept changes: older indexes are then re-read
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
MAX_TEXT = 4 << 20  # a kept file larger than this is not read (nothing we keep is that big)
MAX_EXTENDED_HEADER = 1 << 20  # a PAX or GNU long-name header (Go's archive/tar: the same)
CHUNK = 1 << 20
GZIP_INPUT = 64 << 10  # compressed bytes given to zlib at a time

_METADATA = re.compile(r"(?:.*/)?[^/]+\.dist-info/METADATA|(?:.*/)?[^/]+\.egg-info(?:/PKG-INFO)?")
_STDLIB = re.compile(r"(?:.*/)?lib/python\d+\.\d+/os\.py")
_BINARY = re.compile(r"(?:.*/)?bin/python(?:\d+(?:\.\d+)?)?")
_PATCHLEVEL = re.compile(r"(?:.*/)?include/python\d+\.\d+m?/patchlevel\.h")
_PTH = re.compile(r"(?:.*/)?(?:site|dist)-packages/[^/]+\.pth")
_EDITABLE = re.compile(r"(?:.*/)?(?:site|dist)-packages/__editable___[^/]+_finder\.py")
_PLAIN = {"etc/os-release", "usr/lib/os-release", "var/lib/dpkg/status"}
_ROCM_VERSION = re.compile(r"opt/rocm[^/]*/\.info/version")
# symlinks that can stand for a directory we read through (/opt/rocm -> rocm-7.0.0, a
# site directory or a python lib directory moved elsewhere)
_DIR_LINK = re.compile(r"opt/[^/]+|(?:.*/)?(?:site|dist)-packages|(?:.*/)?lib/python\d+\.\d+")


class LayerIndexJson(TypedDict):
    index_version: int
    digest: str
    media_type: str
    targets: list[str]  # the shim targets whose sources were looked for
    files: dict[str, str]  # path -> kept text (reduced to what is used)
    links: dict[str, str]  # path -> symlink target
    whiteouts: list[str]  # paths this layer deletes from the layers below
    opaque: list[str]  # directories this layer empties of the layers below' content
    bytes: int  # compressed bytes read
    size: int  # decompressed bytes (the tar stream, up to its end)


def target_paths(targets: Iterable[str]) -> tuple[set[str], set[str]]:
    """Path suffixes of the targets' sources, and of their top-level packages' __init__."""
    sources, tops = set(), set()
    for target in targets:
        parts = target.split(".")
        base = "/".join(parts)
        sources |= {f"{base}.py", f"{base}/__init__.py"}
        tops.add(f"{parts[0]}/__init__.py")
    return sources, tops


def _headers(text: str) -> str:
    """The Name and Version lines of a metadata file (its header ends at the first blank)."""
    keep = []
    for line in text.splitlines():
        if not line.strip():
            break
        if line.startswith(("Name:", "Version:")):
            keep.append(line)
    return "\n".join(keep)


def _dpkg_python(text: str) -> str:
    """The ``python3.X-minimal`` stanzas (Package and Version lines) of a dpkg status file."""
    keep = []
    for stanza in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " "
        )
        if re.fullmatch(r"(lib)?python\d+\.\d+-minimal", fields.get("Package", "")):
            keep.append(f"Package: {fields['Package']}\nVersion: {fields.get('Version', '')}")
    return "\n\n".join(keep)


def _reduce(path: str, text: str) -> str:
    if _METADATA.fullmatch(path):
        return _headers(text)
    if path == "var/lib/dpkg/status":
        return _dpkg_python(text)
    if _EDITABLE.fullmatch(path):  # only its MAPPING = {...} line is used
        return "\n".join(line for line in text.splitlines() if line.startswith("MAPPING"))
    if _PATCHLEVEL.fullmatch(path):
        match = re.search(r'#define\s+PY_VERSION\s+"([^"]+)"', text)
        return match.group(1) if match else ""
    return text


class _ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks (what the decompressors read from);
    ``check`` runs before each chunk is taken."""

    def __init__(self, chunks: Iterator[bytes], check: Callable[[], None]) -> None:
        self._chunks = chunks
        self._check = check
        self._buffer = memoryview(b"")
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buffer:
            self._check()
            try:
                self._buffer = memoryview(next(self._chunks))
            except StopIteration:
                return 0
            self.consumed += len(self._buffer)
        n = min(len(target), len(self._buffer))
        target[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n


class _Metered(io.RawIOBase):
    """A layer's decompressed stream, counted against the budget at every read (its limits,
    the command's deadline, a failure elsewhere)."""

    def __init__(self, source: IO[bytes], digest: str, budget: Budget) -> None:
        self._source = source
        self._digest = digest
        self._budget = budget
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        self._budget.check(self._digest)
        n = self._source.readinto(target)  # type: ignore[attr-defined]
        if n:
            self.total += n
            self._budget.spend_layer(self._digest, self.total)
            self._budget.spend_image(self._digest, n)
        return int(n or 0)


class _Gunzip(io.RawIOBase):
    """gzip members one after another (RFC 1952; zlib checks each member's CRC and length)
    as a raw stream whose every read inflates at most what was asked: zlib's ``max_length``,
    the input it did not consume kept for the next read, input taken 64 KiB at a time."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._input = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while True:
            if self._z.eof:  # the member ended: another may follow
                rest = self._z.unused_data or self._raw.read(GZIP_INPUT)
                if not rest:
                    return 0
                self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._input = rest
            elif not self._input:
                self._input = self._raw.read(GZIP_INPUT)
                if not self._input:
                    raise EOFError("the gzip stream ends inside a member")
            out = self._z.decompress(self._input, len(target))
            self._input = self._z.unconsumed_tail
            if out:
                target[: len(out)] = out
                return len(out)


class _HeaderTooLarge(tarfile.TarError):
    pass


class _BoundedTarInfo(tarfile.TarInfo):
    """Extended headers (PAX, GNU long names) are read whole into memory by ``tarfile``: one
    announcing gigabytes would be read whole. Go's ``archive/tar`` (what Docker unpacks layers
    with) refuses those over 1 MiB; so do we, as each 512-byte header block is decoded — by
    the documented ``TarInfo.frombuf``, which ``tarfile`` calls on the ``tarinfo`` class for
    every header, the one after a PAX or GNU header included — before its data is read.
    Public API only: no private ``tarfile`` method is overridden (they change between
    CPython releases); the unit tests run on every claimed Python (scripts/test.sh)."""

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> _BoundedTarInfo:
        info = super().frombuf(buf, encoding, errors)
        if info.type in _EXTENDED and info.size > MAX_EXTENDED_HEADER:
            raise _HeaderTooLarge(
                f"an extended tar header of {info.size} bytes (over {MAX_EXTENDED_HEADER})"
            )
        return info


_EXTENDED = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)


def _decompressed(media_type: str, raw: IO[bytes]) -> IO[bytes]:
    """The layer's tar stream: :class:`_Gunzip`, :mod:`zstandard`, or the bytes themselves."""
    if media_type.endswith(("gzip", "+gzip")):
        return cast(IO[bytes], _Gunzip(raw))
    if media_type.endswith("+zstd"):
        try:
            import zstandard
        except ImportError:
            raise ConfigError(
                f"a {media_type} layer needs the zstandard package, which is not installed",
                hint="install rocmenv's zstd extra: `pip install 'rocmenv[zstd]'` (pipx: "
                "`pipx inject rocmenv zstandard`)",
            ) from None
        reader: IO[bytes] = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        return reader
    if media_type.endswith(("tar", ".tar")):
        return raw
    raise RegistryProtocolError(
        f"layer media type {media_type!r} is not one rocmenv can read",
        hint="supported: gzip, zstd and uncompressed Docker/OCI layers",
    )


def index_size(index: LayerIndexJson) -> int:
    """What an index keeps, in characters (its paths, texts, links, whiteouts)."""
    return (
        sum(len(p) + len(t) for p, t in index["files"].items())
        + sum(len(p) + len(t) for p, t in index["links"].items())
        + sum(len(p) for p in index["whiteouts"])
        + sum(len(p) for p in index["opaque"])
    )


def index_layer(
    digest: str,
    media_type: str,
    chunks: Iterator[bytes],
    targets: Iterable[str],
    budget: Budget | None = None,
) -> LayerIndexJson:
    """Walk the layer's tar once and keep what :mod:`rocmenv.contents` needs, within
    ``budget`` (default: the default limits, no deadline)."""
    if budget is None:
        budget = Budget.of(RegistrySettings(), lambda: float("inf"))
    targets = sorted(set(targets))
    raw = _ChunkReader(chunks, lambda: budget.check(digest))
    index: LayerIndexJson = {
        "index_version": INDEX_VERSION,
        "digest": digest,
        "media_type": media_type,
        "targets": targets,
        "files": {},
        "links": {},
        "whiteouts": [],
        "opaque": [],
        "bytes": 0,
        "size": 0,
    }
    try:
        stream = _decompressed(media_type, io.BufferedReader(raw, CHUNK))
        metered = _Metered(stream, digest, budget)
        with tarfile.open(
            fileobj=io.BufferedReader(metered, CHUNK), mode="r|", tarinfo=_BoundedTarInfo
        ) as tar:
            _walk(tar, index, targets, lambda n: budget.spend_index(digest, n))
            # drain: the digest is checked only once every byte was read
            while raw.read(CHUNK):
                pass
    except (tarfile.TarError, zlib.error, EOFError) as err:  # _HeaderTooLarge too
        raise RegistryProtocolError(
            f"layer {digest} is not a readable {media_type}: {err}"
        ) from None
    except Exception as err:
        if type(err).__name__ == "ZstdError":
            raise RegistryProtocolError(f"layer {digest} is not valid zstd: {err}") from None
        raise
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:  # a generator left mid-stream frees its connection now
            close()
    index["bytes"] = raw.consumed
    index["size"] = metered.total
    return index


def _walk(
    tar: tarfile.TarFile,
    index: LayerIndexJson,
    targets: Sequence[str],
    spend: Callable[[int], None],
) -> None:
    """Every member once, in stream order; what is kept is charged to ``spend``."""
    sources, tops = target_paths(targets)
    wanted_suffixes = tuple("/" + s for s in sorted(sources | tops))
    top_suffixes = tuple("/" + t for t in sorted(tops - sources))
    while (member := tar.next()) is not None:
        tar.members.clear()  # type: ignore[attr-defined]  # stream mode keeps every header
        path = member.name
        while path.startswith("./"):
            path = path[2:]
        path = path.lstrip("/").rstrip("/")
        directory, _, base = path.rpartition("/")
        if base == OPAQUE:
            spend(len(directory))
            index["opaque"].append(directory)
            continue
        if base.startswith(WHITEOUT):
            name = base[len(WHITEOUT) :]
            gone = f"{directory}/{name}" if directory else name
            spend(len(gone))
            index["whiteouts"].append(gone)
            continue
        if member.issym() and (
            _BINARY.fullmatch(path) or path in _PLAIN or _DIR_LINK.fullmatch(path)
        ):
            spend(len(path) + len(member.linkname))
            index["links"][path] = member.linkname
            continue
        if not member.isfile():
            continue
        wanted = (
            path in _PLAIN
            or _ROCM_VERSION.fullmatch(path) is not None
            or _METADATA.fullmatch(path) is not None
            or _PATCHLEVEL.fullmatch(path) is not None
            or path.endswith("/pyvenv.cfg")
            or _PTH.fullmatch(path) is not None
            or _EDITABLE.fullmatch(path) is not None
            or path.endswith(wanted_suffixes)
        )
        if _STDLIB.fullmatch(path) or _BINARY.fullmatch(path):
            spend(len(path))
            index["files"][path] = ""  # presence is what counts
        elif wanted and member.size <= MAX_TEXT:
            handle = tar.extractfile(member)
            text = handle.read().decode("utf-8", "replace") if handle else ""
            kept = "" if path.endswith(top_suffixes) else _reduce(path, text)
            spend(len(path) + len(kept))
            index["files"][path] = kept
