"""Spec quantization §5.1: value = f32(c - z) * s with c - z exact, for the
paths that dequantize in Python (sparse per-tensor affine). The C kernels'
test is tests/c/test_hardening.c (test_affine_*)."""
import numpy as np
import scipy.sparse

import hurray
from hurray._tensor import _affine_difference, _int_to_f32


def test_int_to_f32_rounds_once():
    assert _int_to_f32(2**24 + 1) == np.float32(2**24)          # tie to even
    assert _int_to_f32(2**24 + 3) == np.float32(2**24 + 4)      # tie to even
    assert _int_to_f32(2**64 - 1) == np.float32(2**64)
    assert _int_to_f32(-(2**64 - 1)) == np.float32(-(2**64))
    # 2^63 + 2^39 + 1: just above a tie; via float64 it would first become
    # 2^63 + 2^39 (a tie) and then round to even, 2^63.
    assert _int_to_f32(2**63 + 2**39 + 1) == np.float32(2**63 + 2**40)
    assert _int_to_f32(0) == 0 and not np.signbit(_int_to_f32(0))


def test_affine_difference_is_exact():
    c = np.array([2**24 + 1, -(2**24) - 3], dtype=np.int32)
    assert _affine_difference(c, 3).tolist() == [16777214.0, -16777222.0]
    u = np.array([2**64 - 1, 2**40 + 1], dtype=np.uint64)
    assert _affine_difference(u, 2**40).tolist() == [float(2**64 - 2**40), 1.0]


def test_sparse_per_tensor_affine_int32_codes():
    m = scipy.sparse.csr_matrix(np.array([[0, 2**24 + 1], [5, 0]], dtype=np.int32))
    t = hurray.SparseTensor.from_scipy(m)
    spec = t.descriptor.to_dict()
    spec["quantization"] = {"kind": "per_tensor_affine", "scale": 1.0, "zero_point": 3}
    q = type(t)(hurray.Descriptor.from_dict(spec), list(t.buffers))
    out = q.dequantize()
    assert out[0, 1] == np.float32(16777214.0)
    assert out[1, 0] == np.float32(2.0)
