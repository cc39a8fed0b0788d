"""Image layers built to hurt a reader of layers (``rocmenv inspect``), served by
:class:`tests.support.hostile_registry.HostileRegistry`'s image modes.

* :func:`zero_bomb` — a gzip'd tar holding one file of ``size`` zero bytes, made without
  compressing them: deflate blocks of 1 MiB of zeros end in a full flush, so one block's bytes
  repeat; the gzip trailer's CRC-32 comes from :func:`crc32_zeros`. 20 GiB take ~21 MB and
  well under a second to make;
* :func:`tar_gz` — a gzip'd tar of ``(path, bytes)`` pairs, streamed (the content of a flood
  of identical files is held once).

Standard library only.
"""

from __future__ import annotations

import io
import struct
import tarfile
import zlib
from collections.abc import Iterable

BLOCK = 1 << 20


def _gf2_times(matrix: list[int], vector: int) -> int:
    out, i = 0, 0
    while vector:
        if vector & 1:
            out ^= matrix[i]
        vector >>= 1
        i += 1
    return out


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[n]) for n in range(32)]


def crc32_zeros(crc: int, length: int) -> int:
    """``zlib.crc32(bytes(length), crc)`` in O(log length): the CRC register advanced over
    zero bytes is linear (zlib's ``crc32_combine`` operator), with the pre- and
    post-inversion of CRC-32 around it."""
    register = crc ^ 0xFFFFFFFF
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
    even = _gf2_square(odd)  # two
    odd = _gf2_square(even)  # four
    while length:
        even = _gf2_square(odd)  # one zero byte, then 4, 16, …
        if length & 1:
            register = _gf2_times(even, register)
        length >>= 1
        if not length:
            break
        odd = _gf2_square(even)
        if length & 1:
            register = _gf2_times(odd, register)
        length >>= 1
    return register ^ 0xFFFFFFFF


def zero_bomb(size: int, name: str = "opt/zeros.bin") -> bytes:
    """A gzip'd tar of one file of ``size`` zero bytes (a multiple of 512), end blocks included."""
    if size % 512:
        raise ValueError("size must be a multiple of 512")
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    header = info.tobuf(tarfile.PAX_FORMAT)  # a size over 8 GiB needs a PAX header
    zeros = size + 2 * 512  # the file, then the two end-of-archive blocks
    zeros += -(len(header) + zeros) % tarfile.RECORDSIZE
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    parts = [deflate.compress(header) + deflate.flush(zlib.Z_FULL_FLUSH)]
    block = bytes(BLOCK)
    whole, rest = divmod(zeros, BLOCK)
    if whole:
        first = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
        again = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
        if whole > 1 and deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH) != again:
            raise AssertionError("full-flushed deflate blocks of zeros are not repeatable")
        parts += [first] + [again] * (whole - 1)
    parts.append(deflate.compress(bytes(rest)) + deflate.flush())
    crc = crc32_zeros(zlib.crc32(header), zeros)
    head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    tail = struct.pack("<II", crc, (len(header) + zeros) & 0xFFFFFFFF)
    return b"".join([head, *parts, tail])


def tar_gz(entries: Iterable[tuple[str, bytes | str]], level: int = 6) -> bytes:
    """A gzip'd tar of ``(path, content)``; a ``str`` content is a symlink to it."""
    import gzip

    out = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=out, mode="wb", compresslevel=level, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        for path, content in entries:
            info = tarfile.TarInfo(path)
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()
