"""Fresh output arrays for the dequantize kernels.

numpy.empty asks the kernel for transparent huge pages (madvise(MADV_HUGEPAGE))
on every allocation of 4 MiB or more. Where huge pages come out of memory the
host has taken back (a VM with free-page reporting, such as Firecracker, or a
fragmented machine where the kernel compacts memory on the fault), the first
touch of each 2 MiB page stalls; on the development VM that made a 256 MiB
dequantize swing between 0.3 and 8 GB/s from one process to the next, and lose
to torch, whose allocator uses plain 4 KiB pages. A private anonymous mapping
without the advice gets ordinary pages, whose faults are cheap, predictable and
taken by the kernel's own threads as they write, in parallel.
"""

from __future__ import annotations

import mmap

import numpy as np

# Below glibc's largest mmap threshold (32 MiB on 64-bit) np.empty's memory
# comes from the heap once an allocation of that size has been freed, so a
# loop that dequantizes one layer after another reuses it without a single
# fault, where a fresh mapping would fault every page every time (GGUF types
# at 16 MiB: 8 GB/s from the heap, 2 GB/s from fresh mappings,
# bench/results/gguf_types.md). Above it glibc maps anew for every
# allocation anyway, and then plain pages beat numpy's huge-page advice.
_MMAP_MIN = 32 << 20


def empty(shape, dtype, threads: int = 1) -> np.ndarray:
    """An uninitialised C-contiguous array, page-aligned when large. The
    mapping lives as long as the array (its base); it is unmapped when the
    last view goes. With one thread the pages are populated up front (one
    system call instead of a trap per page, ~20% less CPU); with more, the
    kernel's threads fault their own parts in parallel."""
    dtype = np.dtype(dtype)
    nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    if nbytes < _MMAP_MIN or not hasattr(mmap, "MAP_PRIVATE"):
        return np.empty(shape, dtype)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if threads <= 1:
        flags |= getattr(mmap, "MAP_POPULATE", 0)
    m = mmap.mmap(-1, nbytes, flags=flags)
    return np.frombuffer(m, dtype).reshape(shape)
