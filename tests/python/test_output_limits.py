"""Output-size limits of to_dense and dequantize (issue 14, amplification):
a descriptor can describe far more than it stores, so materialising is
limited by default to max(64 MiB, 64 x stored bytes), with LimitError
raised before anything is allocated; max_output_bytes=N is an absolute
limit, None none."""

import os
import pickle
import tracemalloc

import numpy as np
import pytest

import hurray


def stride0(dtype="float32", quant=None, shape=(8192, 8192)):
    """The issue's example: a stride-0 tensor whose one stored element
    stands for every element (a 265-byte file once made to_dense allocate
    256 MiB)."""
    item = np.dtype(dtype).itemsize
    spec = {
        "dtype": dtype,
        "shape": list(shape),
        "strides": [0] * len(shape),
        "layout": {"kind": "dense", "data_buffer": 0},
        "buffers": [{"role": "data", "byte_size": item, "alignment": 1, "sync_mode": "ready"}],
        "device": {"type": 1, "id": 0, "memory_class": "host"},
    }
    if quant is not None:
        spec["quantization"] = quant
    return hurray.Tensor(hurray.Descriptor.from_dict(spec), [np.ones(1, dtype).view(np.uint8)])


def test_to_dense_refuses_amplification_before_allocating():
    t = stride0()
    tracemalloc.start()
    try:
        with pytest.raises(hurray.LimitError) as info:
            t.to_dense()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert info.value.status_name == "HURRAY_ERR_LIMIT"
    assert "268435456 bytes" in str(info.value)
    assert peak < (1 << 20)  # refused before numpy allocated the output
    with pytest.raises(hurray.LimitError):
        t.to_dense(max_output_bytes=hurray.DEFAULT_OUTPUT_LIMIT)
    with pytest.raises(hurray.LimitError):
        t.to_dense(max_output_bytes=(256 << 20) - 1)


def test_to_dense_opt_out_and_absolute_limit():
    t = stride0(shape=(4096, 8192))  # 128 MiB: beyond the default
    with pytest.raises(hurray.LimitError):
        t.to_dense()
    dense = t.to_dense(max_output_bytes=None)
    assert dense.shape == (4096, 8192) and dense[4095, 8191] == 1.0
    del dense
    assert t.to_dense(max_output_bytes=128 << 20).nbytes == 128 << 20


def test_dequantize_refuses_amplification():
    q = {"kind": "per_tensor_affine", "scale": 0.5, "zero_point": 0}
    t = stride0("int8", q)
    with pytest.raises(hurray.LimitError):
        t.dequantize()
    with pytest.raises(hurray.LimitError):
        t.dequantize(np.float16)
    with pytest.raises(hurray.LimitError):
        t.dequantize(max_output_bytes=1000)
    small = stride0("int8", q, shape=(64, 64))
    assert small.dequantize()[63, 63] == 0.5
    assert small.dequantize(max_output_bytes=64 * 64 * 4)[0, 0] == 0.5
    with pytest.raises(hurray.LimitError):
        small.dequantize(max_output_bytes=64 * 64 * 4 - 1)
    # out= is caller memory: no limit applies to it.
    out = np.empty((64, 64), np.float32)
    assert small.dequantize(out=out, max_output_bytes=0) is out


def test_default_allows_ordinary_tensors_and_small_expansions():
    a = np.arange(1 << 20, dtype=np.float32)
    t = hurray.from_numpy(a)
    assert np.array_equal(t.to_dense(), a)
    # Below the 64 MiB floor any expansion is fine.
    assert stride0(shape=(2048, 2048)).to_dense().shape == (2048, 2048)


def test_limits_through_a_file(tmp_path):
    path = os.path.join(tmp_path, "amplified.hurray")
    hurray.save(path, {"w": stride0()})
    assert os.path.getsize(path) < 1024
    with hurray.open(path) as f:
        t = f["w"]
        with pytest.raises(hurray.LimitError):
            t.to_dense()
    for t in hurray.load(path).values():
        with pytest.raises(hurray.LimitError):
            t.to_dense()


def test_bad_limits_are_refused():
    t = stride0(shape=(4, 4))
    for bad in (-1, 1.5, "10", True):
        with pytest.raises((TypeError, ValueError)):
            t.to_dense(max_output_bytes=bad)
    assert t.to_dense(max_output_bytes=2**80).shape == (4, 4)
    assert pickle.loads(pickle.dumps(hurray.DEFAULT_OUTPUT_LIMIT)) is hurray.DEFAULT_OUTPUT_LIMIT
