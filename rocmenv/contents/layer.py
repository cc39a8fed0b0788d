"""One layer, read once: stream it, decompress it, walk its tar, keep the little that matters.

Media types: Docker and OCI gzip (``…tar.gzip``, ``…tar+gzip``), OCI zstd (``…tar+zstd``,
through the ``zstandard`` package — the standard library has zstd only from Python 3.14) and
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
"""

from __future__ import annotations

import io
import re
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from typing import IO, TypedDict

from rocmenv.errors import RegistryProtocolError

INDEX_VERSION = 1  # bump whenever what is kept changes: older indexes are then re-read
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
MAX_TEXT = 4 << 20  # a kept file larger than this is not read (nothing we keep is that big)

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
    """A file object over an iterator of byte chunks (what ``tarfile`` and the
    decompressors read from)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
            self.consumed += len(self._buffer)
        n = min(len(target), len(self._buffer))
        target[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n


class _Gunzip(io.RawIOBase):
    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._out = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._out:
            data = self._raw.read(1 << 20)
            if not data:
                self._out = self._z.flush()
                if not self._out:
                    return 0
                break
            self._out = self._z.decompress(data)
            while self._z.eof and self._z.unused_data:  # concatenated gzip members
                rest = self._z.unused_data
                self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
                self._out += self._z.decompress(rest)
        n = min(len(target), len(self._out))
        target[:n] = self._out[:n]
        self._out = self._out[n:]
        return n


def _decompressed(media_type: str, raw: IO[bytes]) -> IO[bytes]:
    if media_type.endswith(("gzip", "+gzip")):
        return io.BufferedReader(_Gunzip(raw), 1 << 20)
    if media_type.endswith("+zstd"):
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    if media_type.endswith(("tar", ".tar")):
        return raw
    raise RegistryProtocolError(
        f"layer media type {media_type!r} is not one rocmenv can read",
        hint="supported: gzip, zstd and uncompressed Docker/OCI layers",
    )


def index_layer(
    digest: str, media_type: str, chunks: Iterator[bytes], targets: Iterable[str]
) -> LayerIndexJson:
    """Walk the layer's tar once and keep what :mod:`rocmenv.contents` needs."""
    targets = sorted(set(targets))
    sources, tops = target_paths(targets)
    raw = _ChunkReader(chunks)
    stream = _decompressed(media_type, io.BufferedReader(raw, 1 << 20))
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
    }
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                path = member.name
                while path.startswith("./"):
                    path = path[2:]
                path = path.lstrip("/").rstrip("/")
                directory, _, base = path.rpartition("/")
                if base == OPAQUE:
                    index["opaque"].append(directory)
                    continue
                if base.startswith(WHITEOUT):
                    name = base[len(WHITEOUT) :]
                    index["whiteouts"].append(f"{directory}/{name}" if directory else name)
                    continue
                if member.issym() and (
                    _BINARY.fullmatch(path) or path in _PLAIN or _DIR_LINK.fullmatch(path)
                ):
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
                    or any(path.endswith("/" + s) for s in sources | tops)
                )
                if _STDLIB.fullmatch(path) or _BINARY.fullmatch(path):
                    index["files"][path] = ""  # presence is what counts
                elif wanted and member.size <= MAX_TEXT:
                    handle = tar.extractfile(member)
                    text = handle.read().decode("utf-8", "replace") if handle else ""
                    is_top = any(path.endswith("/" + t) for t in tops - sources)
                    index["files"][path] = "" if is_top else _reduce(path, text)
            # drain: the digest is checked only once every byte was read
            while raw.read(1 << 20):
                pass
    except (tarfile.TarError, zlib.error, EOFError) as err:
        raise RegistryProtocolError(
            f"layer {digest} is not a readable {media_type}: {err}"
        ) from None
    except Exception as err:
        if type(err).__name__ == "ZstdError":
            raise RegistryProtocolError(f"layer {digest} is not valid zstd: {err}") from None
        raise
    index["bytes"] = raw.consumed
    return index
