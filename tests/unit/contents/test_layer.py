"""One layer read within its budget: decompressed bytes per layer and per image, kept bytes,
the deadline, a failure elsewhere; extended tar headers and tarfile's member list bounded.
In-memory layers (the hostile registry and the real CLI: tests/integration/contents)."""

from __future__ import annotations

import gzip
import io
import sys
import tarfile
import tracemalloc
from collections.abc import Iterator

import pytest
import zstandard

from rocmenv.contents.budget import Budget, Stopped
from rocmenv.contents.layer import index_layer, index_size
from rocmenv.errors import ConfigError, RegistryProtocolError, RegistryUnavailable
from tests.support.hostile_layers import tar_gz, zero_bomb

GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
TAR = "application/vnd.oci.image.layer.v1.tar"
MiB = 1 << 20


def digest(n: int = 0) -> str:
    return f"sha256:{n:064x}"


def budget(
    layer: int = 1 << 40, image: int = 1 << 40, index: int = 1 << 30, left: float = 1e9
) -> Budget:
    return Budget(layer=layer, image=image, index=index, time_left=lambda: left, deadline=5)


class Counted:
    """Chunks of a blob, counting how many were taken."""

    def __init__(self, blob: bytes, size: int = 64 * 1024) -> None:
        self.blob, self.size, self.taken = blob, size, 0

    def __iter__(self) -> Iterator[bytes]:
        for i in range(0, len(self.blob), self.size):
            self.taken += 1
            yield self.blob[i : i + self.size]


def test_a_gzip_bomb_stops_at_the_layer_limit_having_read_little_of_it() -> None:
    bomb = zero_bomb(256 * MiB)  # ~270 kB
    chunks = Counted(bomb, 4096)
    with pytest.raises(
        RegistryProtocolError, match=r"over its limit of 8388608 bytes.*limits\.layer"
    ):
        index_layer(digest(), GZIP, iter(chunks), [], budget(layer=8 * MiB))
    assert chunks.taken * 4096 <= 128 * 1024 < len(bomb) // 2  # 8 MiB of zeros: ~8 kB


def test_a_zstd_bomb_stops_at_the_layer_limit() -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("zeros")
        info.size = 64 * MiB
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    blob = zstandard.ZstdCompressor(level=3).compress(raw.getvalue())
    with pytest.raises(RegistryProtocolError, match=r"limits\.layer"):
        index_layer(digest(), ZSTD, iter(Counted(blob)), [], budget(layer=8 * MiB))


def test_a_zstd_layer_without_the_zstd_extra_is_a_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``zstandard`` is the rocmenv[zstd] extra: not installed (``None`` in sys.modules makes
    its import fail as a missing module does), a zstd layer is refused before a byte is
    read; the same layer with it installed is read."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("etc"))
    blob = zstandard.ZstdCompressor().compress(raw.getvalue())
    with monkeypatch.context() as patched:
        patched.setitem(sys.modules, "zstandard", None)
        chunks = Counted(blob)
        with pytest.raises(ConfigError) as err:
            index_layer(digest(), ZSTD, iter(chunks), [], budget())
        assert "rocmenv[zstd]" in (err.value.hint or "")
        assert chunks.taken == 0
    assert index_layer(digest(), ZSTD, iter(Counted(blob)), [], budget())["size"] == len(
        raw.getvalue()
    )


def test_the_image_limit_counts_every_layer_of_the_image() -> None:
    shared = budget(layer=32 * MiB, image=12 * MiB)
    first = index_layer(digest(1), GZIP, iter(Counted(zero_bomb(8 * MiB))), [], shared)
    assert first["size"] > 8 * MiB  # the tar: header, file, end blocks
    with pytest.raises(RegistryProtocolError, match=r"over their limit of 12582912.*limits\.image"):
        index_layer(digest(2), GZIP, iter(Counted(zero_bomb(8 * MiB))), [], shared)


def test_kept_files_are_charged_to_the_index_limit() -> None:
    cfg = b"include-system-site-packages = false\n" * 28000  # ~1 MiB each
    blob = tar_gz((f"opt/v{i}/pyvenv.cfg", cfg) for i in range(5))
    with pytest.raises(RegistryProtocolError, match=r"over its limit of 2097152.*layer-index"):
        index_layer(digest(), GZIP, iter(Counted(blob)), [], budget(index=2 * MiB))
    small = index_layer(digest(), GZIP, iter(Counted(blob)), [], budget(index=8 * MiB))
    assert 5 * len(cfg) <= index_size(small) < 8 * MiB


def test_the_deadline_is_checked_while_decompressing_not_only_between_requests() -> None:
    calls = iter(range(1_000_000))
    late = Budget(
        layer=1 << 40,
        image=1 << 40,
        index=1 << 30,
        time_left=lambda: 10.0 - next(calls),  # runs out on the 11th read
        deadline=5,
    )
    chunks = Counted(zero_bomb(1024 * MiB), 1 << 20)  # one chunk: the network is done
    with pytest.raises(RegistryUnavailable, match=r"deadline \(5 s\).*"):
        index_layer(digest(), GZIP, iter(chunks), [], late)
    assert chunks.taken == 1


def test_a_failure_elsewhere_stops_the_layer_at_its_next_read() -> None:
    shared = budget()
    shared.stop()
    with pytest.raises(Stopped):
        index_layer(digest(), GZIP, iter(Counted(zero_bomb(MiB))), [], shared)


def _extended(kind: bytes, size: int, name: str = "././@LongLink") -> bytes:
    header = tarfile.TarInfo(name)
    header.type, header.size = kind, size
    return header.tobuf(tarfile.USTAR_FORMAT)


EXTENDED_KINDS = {
    "pax": tarfile.XHDTYPE,
    "pax-global": tarfile.XGLTYPE,
    "solaris": tarfile.SOLARIS_XHDTYPE,
    "gnu-longname": tarfile.GNUTYPE_LONGNAME,
    "gnu-longlink": tarfile.GNUTYPE_LONGLINK,
}


@pytest.mark.parametrize("kind", sorted(EXTENDED_KINDS))
def test_an_extended_tar_header_over_1_mib_is_refused_before_it_is_read(kind: str) -> None:
    """The header announces 1 GiB; the stream would serve it (zeros, generated): refused
    after the first chunks, never read into memory."""
    taken = 0

    def chunks() -> Iterator[bytes]:
        nonlocal taken
        yield _extended(EXTENDED_KINDS[kind], 1 << 30)
        while True:
            taken += 1
            yield bytes(64 * 1024)

    with pytest.raises(RegistryProtocolError, match=r"extended tar header of 1073741824 bytes"):
        index_layer(digest(), TAR, chunks(), [], budget())
    assert taken * 64 * 1024 < 4 * MiB  # the reader's buffers, not the header's gigabyte


def test_an_extended_header_after_another_is_bounded_too() -> None:
    """tarfile reads the header that follows a PAX header itself (nested): that one is
    checked the same way."""
    raw = io.BytesIO()
    record = b"19 path=short-name\n"
    raw.write(_extended(tarfile.XHDTYPE, len(record), "././@PaxHeader"))
    raw.write(record.ljust(512, b"\0"))
    raw.write(_extended(tarfile.GNUTYPE_LONGNAME, 2 * MiB))
    raw.write(bytes(2 * MiB + 1024))
    with pytest.raises(RegistryProtocolError, match=r"extended tar header of 2097152 bytes"):
        index_layer(digest(), TAR, iter(Counted(raw.getvalue())), [], budget())


def test_extended_headers_up_to_the_limit_are_read() -> None:
    """A long name (PAX and GNU) under 1 MiB is a normal member: its file is kept."""
    name = "usr/lib/python3/dist-packages/" + "x" * 300 + ".dist-info/METADATA"
    data = b"Name: x\nVersion: 1.0\n"
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        index = index_layer(digest(), TAR, iter(Counted(raw.getvalue())), [], budget())
        assert name in index["files"], fmt


def test_the_headers_of_walked_members_are_not_kept() -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for i in range(30000):
            info = tarfile.TarInfo(f"d/{i}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    blob = gzip.compress(raw.getvalue(), 1)
    tracemalloc.start()
    try:
        index_layer(digest(), GZIP, iter(Counted(blob)), [], budget())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 * MiB  # ~5 MiB of buffers; tarfile keeping every TarInfo: ~18 MiB


def test_a_normal_layer_records_its_sizes() -> None:
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        info = tarfile.TarInfo("usr/lib/python3.11/os.py")
        info.size = 4
        archive.addfile(info, io.BytesIO(b"# os"))
    blob = gzip.compress(tar.getvalue())
    index = index_layer(digest(), GZIP, iter(Counted(blob, 7)), [], budget())
    assert index["files"] == {"usr/lib/python3.11/os.py": ""}
    assert (index["bytes"], index["size"]) == (len(blob), len(tar.getvalue()))


def _gunzip_all(blob: bytes, chunk: int, ask: int = 1 << 20) -> bytes:
    from rocmenv.contents.layer import _ChunkReader, _Gunzip

    source = io.BufferedReader(
        _ChunkReader(iter(Counted(blob, chunk)), lambda: None),
        1 << 20,
    )
    reader, out, buffer = _Gunzip(source), bytearray(), bytearray(ask)
    while n := reader.readinto(buffer):
        assert n <= ask  # every read bounded by what was asked
        out += buffer[:n]
    return bytes(out)


@pytest.mark.parametrize("chunk", [1, 7, 65536, 1 << 20])
@pytest.mark.parametrize("members", [1, 3])
def test_the_gzip_reader_reads_what_the_gzip_module_reads(chunk: int, members: int) -> None:
    import os
    import random

    rng = random.Random(members * chunk)
    parts = [
        os.urandom(rng.randrange(1, 200_000))
        + b"text " * rng.randrange(1, 50_000)
        + bytes(rng.randrange(0, 3 * MiB))
        for _ in range(members)
    ]
    blob = b"".join(gzip.compress(p, compresslevel=rng.choice([1, 6, 9])) for p in parts)
    if chunk == 1:
        blob = gzip.compress(parts[0][:5000]) * members
    assert _gunzip_all(blob, chunk, ask=rng.choice([512, 10240, MiB])) == gzip.decompress(blob)


def test_a_truncated_or_corrupt_gzip_stream_is_an_error() -> None:
    import zlib

    blob = gzip.compress(b"x" * 100_000 + bytes(range(256)) * 100)
    for cut in (len(blob) - 4, len(blob) // 2, 11):
        with pytest.raises(EOFError):
            _gunzip_all(blob[:cut], 4096)
    crc = bytearray(blob)
    crc[-6] ^= 0xFF  # the CRC-32 in the trailer
    with pytest.raises(zlib.error):
        _gunzip_all(bytes(crc), 4096)
    with pytest.raises(zlib.error):
        _gunzip_all(b"\x1f\x8b not gzip at all", 4096)


def test_a_gzip_bomb_is_inflated_in_pieces_of_the_size_asked() -> None:
    from rocmenv.contents.layer import _ChunkReader, _Gunzip

    bomb = zero_bomb(1024 * MiB)  # ~1 MB
    reader = _Gunzip(io.BufferedReader(_ChunkReader(iter([bomb]), lambda: None), 1 << 20))
    tracemalloc.start()
    try:
        buffer = bytearray(MiB)
        total = sum(reader.readinto(buffer) for _ in range(200))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 150 * MiB < total <= 200 * MiB  # each read at most what was asked
    assert peak < 8 * MiB  # the reader it replaced held a whole GiB
