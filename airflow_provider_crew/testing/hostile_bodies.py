"""Hostile answer bodies: what the ``oversized`` and ``gzip_bomb`` faults send (see :mod:`.faults`).

Pure bytes, no HTTP: the provider's client tests use them directly too.
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Iterator

__all__ = ["gzip_bomb_body", "oversized_body"]

# The body of an ``oversized`` or ``gzip_bomb`` answer: a status record whose ``result`` is padded
# so the whole JSON is exactly ``size`` bytes. A client that reads it whole sees a success.
_HOSTILE_PREFIX = b'{"state": "SUCCESS", "status": "Completed", "result": "'
_HOSTILE_SUFFIX = b'"}'
_BLOCK = 1024 * 1024


def _filler_length(size: int) -> int:
    return max(0, size - len(_HOSTILE_PREFIX) - len(_HOSTILE_SUFFIX))


def oversized_body(size: int) -> Iterator[bytes]:
    """The ``oversized`` body in pieces of at most 1 MiB: the service never holds it whole."""
    yield _HOSTILE_PREFIX
    left = _filler_length(size)
    block = b"x" * min(_BLOCK, left)
    while left > 0:
        piece = block if left >= len(block) else block[:left]
        left -= len(piece)
        yield piece
    yield _HOSTILE_SUFFIX


@functools.lru_cache(maxsize=4)
def gzip_bomb_body(size: int) -> bytes:
    """A gzip stream that inflates to the ``oversized`` body of ``size`` bytes (about 1/1000 of it).

    Built without compressing ``size`` bytes: a full flush resets the compressor, so every 1 MiB
    block of filler compresses to the same bytes, which are repeated. Takes about a second for
    512 MiB (the CRC is still computed over the inflated data, as gzip requires).
    """
    filler = _filler_length(size)
    blocks, rest = divmod(filler, _BLOCK)
    block = b"x" * _BLOCK
    tail = b"x" * rest + _HOSTILE_SUFFIX
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = compressor.compress(_HOSTILE_PREFIX) + compressor.flush(zlib.Z_FULL_FLUSH)
    packed_block = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH) if blocks else b""
    packed_tail = compressor.compress(tail) + compressor.flush()
    crc = zlib.crc32(_HOSTILE_PREFIX)
    for _ in range(blocks):
        crc = zlib.crc32(block, crc)
    crc = zlib.crc32(tail, crc)
    length = len(_HOSTILE_PREFIX) + filler + len(_HOSTILE_SUFFIX)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # gzip, deflate, no name, no mtime
    trailer = struct.pack("<II", crc & 0xFFFFFFFF, length & 0xFFFFFFFF)
    return header + head + packed_block * blocks + packed_tail + trailer
