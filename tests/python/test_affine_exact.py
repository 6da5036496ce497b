"""Spec quantization §5.1: value = f32(c - z) * s with c - z exact, for the
sparse per-tensor affine path, which dequantizes its values with the C
kernel (tests/c/test_hardening.c test_affine_*) and densifies in C."""

import numpy as np
import scipy.sparse

import hurray


def _dequantized(codes: np.ndarray, zero_point: int) -> list:
    """The C kernel's per-tensor affine values (scale 1) of a 1-D code array:
    what sparse per-tensor affine tensors are dequantized with too."""
    d = hurray.Descriptor(
        hurray._dtypes.from_numpy(codes.dtype),
        codes.shape,
        quantization=hurray.PerTensorAffine(1.0, zero_point),
        buffers=[hurray.Buffer("data", codes.nbytes)],
    )
    return hurray.Tensor(d, [codes.view(np.uint8)]).dequantize().tolist()


def test_affine_difference_is_exact():
    c = np.array([2**24 + 1, -(2**24) - 3], dtype=np.int32)
    assert _dequantized(c, 3) == [16777214.0, -16777222.0]
    u = np.array([2**64 - 1, 2**40 + 1], dtype=np.uint64)
    assert _dequantized(u, 2**40) == [float(np.float32(2**64 - 2**40)), 1.0]
    # 2^63 + 2^39 + 1 - 0: just above a tie; via float64 it would first
    # become 2^63 + 2^39 (a tie) and then round to even, 2^63.
    assert _dequantized(np.array([2**63 + 2**39 + 1], np.uint64), 0) == [float(2**63 + 2**40)]


def test_sparse_per_tensor_affine_int32_codes():
    m = scipy.sparse.csr_matrix(np.array([[0, 2**24 + 1], [5, 0]], dtype=np.int32))
    t = hurray.SparseTensor.from_scipy(m)
    spec = t.descriptor.to_dict()
    spec["quantization"] = {"kind": "per_tensor_affine", "scale": 1.0, "zero_point": 3}
    q = type(t)(hurray.Descriptor.from_dict(spec), list(t.buffers))
    out = q.dequantize()
    assert out[0, 1] == np.float32(16777214.0)
    assert out[1, 0] == np.float32(2.0)
