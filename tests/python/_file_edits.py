"""Edits of a saved file's index for tests: find a tensor's descriptor and
buffer records, and reseal the index and trailer checksums afterwards, so
that only what the edit changed is wrong."""

from __future__ import annotations

import ctypes
import ctypes.util
import struct


def xxh3(data: bytes) -> int:
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib.XXH3_64bits(data, len(data))


def index_range(blob: bytes):
    index_offset, index_length = struct.unpack_from("<QQ", blob, len(blob) - 64)
    return index_offset, index_length


def reseal(blob: bytearray) -> None:
    """Recomputes the index and trailer checksums, so that only what the
    index says is wrong, not its checksum."""
    offset, length = index_range(blob)
    t = len(blob) - 64
    struct.pack_into("<Q", blob, t + 16, xxh3(bytes(blob[offset : offset + length])))
    struct.pack_into("<Q", blob, t + 48, xxh3(bytes(blob[t : t + 48])))


def descriptor_at(blob: bytes, name: str):
    """(start, length) of `name`'s encoded descriptor inside the file."""
    offset, length = index_range(blob)
    p = offset
    while p < offset + length:
        n = struct.unpack_from("<H", blob, p)[0]
        entry = blob[p + 2 : p + 2 + n].decode()
        d = struct.unpack_from("<I", blob, p + 2 + n)[0]
        start = p + 6 + n
        if entry == name:
            return start, d
        buffers = struct.unpack_from("<I", blob, start + d)[0]
        p = start + d + 4 + 24 * buffers
    raise KeyError(name)


def buffer_records_at(blob: bytes, name: str) -> int:
    """Offset of `name`'s first buffer record (u64 offset, length, checksum
    each) inside the file."""
    start, length = descriptor_at(blob, name)
    return start + length + 4


def rewrite_buffer(blob: bytearray, name: str, buffer: int, data: bytes) -> None:
    """Replaces buffer `buffer` of `name` (same length) and its checksum."""
    rec = buffer_records_at(blob, name) + 24 * buffer
    offset, length = struct.unpack_from("<QQ", blob, rec)
    assert len(data) == length
    blob[offset : offset + length] = data
    struct.pack_into("<Q", blob, rec + 16, xxh3(bytes(data)))
    reseal(blob)
