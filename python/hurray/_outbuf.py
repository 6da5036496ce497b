"""Fresh output arrays for the dequantize kernels.

numpy.empty asks the kernel for transparent huge pages (madvise(MADV_HUGEPAGE))
on every allocation of 4 MiB or more. Where huge pages come out of memory the
host has taken back (a VM with free-page reporting, such as Firecracker, or a
fragmented machine where the kernel compacts memory on the fault), the first
touch of each 2 MiB page stalls; on the development VM a 2 MiB page costs a
fifth of its 512 small pages when it was freed moments before, and two and a
half times as much when it was not. So a large output is a private anonymous
mapping of its own, populated before the kernel runs (a trap per page as the
kernel writes cost more CPU than the kernel itself), and the C side measures
which page size is cheap on this very memory (src/quant/fresh_pages.h).
"""

from __future__ import annotations

import mmap

import numpy as np

from . import _dtypes, _hurray

# From _hurray.FRESH_MAPPING_MIN (32 MiB, src/quant/fresh_pages.h) an output
# is a mapping of our own; below it np.empty's memory comes from the heap
# once an allocation of that size has been freed, so a loop that dequantizes
# one layer after another reuses it without a single fault, where a fresh
# mapping would fault every page every time (GGUF types at 16 MiB: 8 GB/s
# from the heap, 2 GB/s from fresh mappings, bench/results/gguf_types.md).


def empty(shape, dtype, threads: int = 1) -> np.ndarray:
    """An uninitialised C-contiguous array, page-aligned when large. The
    mapping lives as long as the array (its base); it is unmapped when the
    last view goes. Its pages are made present before it is returned, by
    MADV_POPULATE_WRITE on `threads` threads (split in C as the kernel that
    will write it splits its work): populating costs about two thirds of the
    CPU of a trap per 4 KiB page, and the kernel's own threads faulting in
    parallel made 2 threads slower than 1 (issue 19)."""
    dtype = _dtypes.as_numpy(dtype)
    nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    if nbytes < _hurray.FRESH_MAPPING_MIN or not hasattr(mmap, "MAP_PRIVATE"):
        return np.empty(shape, dtype)
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    out = np.frombuffer(m, dtype)
    _hurray._prefault(out.view(np.uint8), True, int(threads))
    return out.reshape(shape)
