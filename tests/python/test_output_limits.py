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


def test_dequantize_counts_the_float32_it_decodes_into():
    """A narrow target (float8, a sparse tensor's float16) was checked at its
    own size, but the tensor is decoded to float32 first: 4x (a sparse
    tensor 5x) the limit in memory."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q = {"kind": "per_tensor_affine", "scale": 0.5, "zero_point": 0}
    small = stride0("int8", q, shape=(64, 64))
    f32 = 64 * 64 * 4
    for dtype in (ml_dtypes.float8_e4m3fn, np.float64):
        with pytest.raises(hurray.LimitError):
            small.dequantize(dtype, max_output_bytes=f32 - 1)
        small.dequantize(dtype, max_output_bytes=max(f32, 64 * 64 * np.dtype(dtype).itemsize))
    # float16 comes from the kernels directly: its own size is the limit.
    assert small.dequantize(np.float16, max_output_bytes=64 * 64 * 2)[0, 0] == 0.5
    values = hurray.quantize(np.ones(64, np.float32), "affine")
    d = hurray.Descriptor(
        "int8",
        (64, 64),
        layout=hurray.Sparse("coo", "int64", 64, values_buffer=0, index_buffers=(1, 1)),
        quantization=values.descriptor.quantization,
        buffers=[hurray.Buffer("values", 64), hurray.Buffer("indices", 64 * 8, 8)],
    )
    t = hurray.Tensor(d, [values.codes(), np.arange(64, dtype=np.int64)])
    with pytest.raises(hurray.LimitError):
        t.dequantize(np.float16, max_output_bytes=64 * 64 * 2)
    assert t.dequantize(np.float16, max_output_bytes=f32)[5, 5] == 1.0


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


def test_shapes_numpy_cannot_hold_are_unsupported_errors():
    """numpy() and codes() of a stride-0 (2^31, 2^31) float32 tensor (2^64
    bytes as numpy counts them), and to_dense() of an empty int4 paged
    tensor of shape (2^62, 0, 6), raised numpy's bare ValueError."""
    t = stride0(shape=(2**31, 2**31))
    for read in (t.numpy, t.codes, lambda: np.asarray(t)):
        with pytest.raises(hurray.UnsupportedError, match="numpy cannot hold"):
            read()
    d = hurray.Descriptor(
        "int4",
        (2**62, 0, 6),
        layout=hurray.Paged(1, 4, 1, "int32", 0, 1),
        buffers=[hurray.Buffer("page_pool", 96), hurray.Buffer("page_table", 0)],
    )
    paged = hurray.Tensor(d, [bytes(96), np.zeros(0, np.int32)])
    with pytest.raises(hurray.UnsupportedError, match="numpy cannot hold"):
        paged.to_dense()
