"""Every layout, quantization kind and dtype through the __hurray__ capsule:
descriptors equal, buffers byte-exact and shared, not copied."""

import numpy as np
import pytest
from _hurray_samples import SAMPLES
from hypothesis import given, settings
from hypothesis import strategies as st
from test_files import assert_same_tensor, build, check_values

import hurray
from hurray import Buffer, Descriptor, _dtypes


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_sample_through_the_capsule(name):
    t, _ = build(name)
    u = hurray.from_hurray(t)
    assert_same_tensor(u, t)
    check_values(name, u)
    for i in range(t.buffer_count):  # zero-copy: the consumer sees the producer's memory
        if t.descriptor.buffers[i].byte_size:
            assert u._buffer_address(i) == t._buffer_address(i)
    # A consumer can hand it on again: a second hop is still zero-copy.
    v = hurray.from_hurray(u)
    assert_same_tensor(v, t)


@pytest.mark.parametrize("dtype", hurray.DTYPES)
@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(0, 5), min_size=0, max_size=3), seed=st.integers(0, 2**16))
def test_every_dtype_through_the_capsule(dtype, shape, seed):
    count = int(np.prod(shape)) if shape else 1
    size = _dtypes.storage_bytes(dtype, count)
    raw = np.random.default_rng(seed).integers(0, 256, size=max(size, 1), dtype=np.uint8)[:size]
    if _dtypes.BITS[dtype] < 8 and size:
        # Padding bits past the last element are not part of the tensor.
        used = count * _dtypes.BITS[dtype]
        if used % 8:
            raw[-1] &= (1 << (used % 8)) - 1
    t = hurray.Tensor(Descriptor(dtype, shape, buffers=[Buffer("data", size)]), [raw])
    u = hurray.from_hurray(t)
    assert u.descriptor == t.descriptor
    assert bytes(u._buffer(0)) == raw.tobytes()
    if size:
        assert u._buffer_address(0) == raw.ctypes.data
