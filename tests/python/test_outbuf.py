"""Fresh dequantize outputs (python/hurray/_outbuf.py): large ones come from a
private anonymous mapping rather than numpy's huge-page heap; the array must
behave like any other."""

import gc
import pickle

import numpy as np
import pytest

import hurray
from hurray import _outbuf


@pytest.mark.parametrize("threads", [1, 2])
def test_large_dequantize_matches_out_and_owns_its_mapping(threads):
    x = np.random.default_rng(3).standard_normal((4096, 2560), dtype=np.float32)  # 40 MiB
    q = hurray.quantize(x, "affine", dtype="int8")
    y = q.dequantize(threads=threads)
    ref = np.empty_like(x)
    q.dequantize(out=ref)
    assert y.shape == x.shape and y.dtype == np.float32
    assert y.flags.c_contiguous and y.flags.writeable and y.flags.aligned
    assert y.ctypes.data % 4096 == 0
    assert np.array_equal(y.view(np.uint32), ref.view(np.uint32))
    view = y[10:20]
    del y, q
    gc.collect()
    assert np.array_equal(view, ref[10:20])  # the mapping outlives the first owner
    view[0, 0] = 1.5
    assert np.array_equal(pickle.loads(pickle.dumps(view)), view)


def test_small_and_empty_outputs_are_plain_arrays():
    a = _outbuf.empty((3, 4), np.float16)
    assert a.shape == (3, 4) and a.dtype == np.float16 and a.flags.owndata
    z = _outbuf.empty((0, 7), np.float32)
    assert z.shape == (0, 7)
    mid = _outbuf.empty((2, 1 << 20), np.float32)  # 8 MiB: the heap, reused across calls
    assert mid.flags.owndata
    big = _outbuf.empty((10, 1 << 20), np.float32, threads=2)  # 40 MiB: a mapping
    assert big.shape == (10, 1 << 20) and big.flags.writeable and not big.flags.owndata
    big[...] = 2.0
    assert float(big.sum()) == 20.0 * (1 << 20)
