"""The specialised runs of the packed/two-level dequantize kernel
(src/quant/packed.c) against its generic loop, byte for byte.

HURRAY_PACKED_GENERIC=1 makes the C kernel keep its generic per-element
loop; every case here decodes with it (one thread) and without it (1, 2 and
3 threads, float32, float16 and bfloat16) and wants the same bytes. The
shapes force each specialised run: words along the row (GPTQ's columns of
words, compressed-tensors, bitsandbytes), one lane per row (AWQ), bytes
(FP8 2-D blocks), nibbles at odd offsets (NVFP4), partial edge blocks and
tiles, random lane orders, group-index permutations, and tensors large
enough (over 8 MiB of float32) to be split over threads, by rows or, for
NF4's one flat row, by columns.
"""

from __future__ import annotations

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from test_quant_packed import (
    BlockAffine,
    Nf4,
    Packing,
    PerChannelAffine,
    affine_case,
    check,
    pack_plain,
    pack_words,
    random_scales,
    tensor,
)

OUTS = (np.float32, np.float16, ml_dtypes.bfloat16)


def same_bytes(t, monkeypatch, threads=(1, 2, 3)):
    for out in OUTS:
        monkeypatch.setenv("HURRAY_PACKED_GENERIC", "1")
        want = t.dequantize(out, threads=1)
        monkeypatch.delenv("HURRAY_PACKED_GENERIC")
        for n in threads:
            got = t.dequantize(out, threads=n)
            assert got.tobytes() == want.tobytes(), (out, n)
    return want


BIG = (1024, 2304)  # 9.4 MB of float32: two threads
SMALL = (40, 200)  # K = 200: partial group of 64, partial tile of 256


@pytest.mark.parametrize("shape", [SMALL, BIG])
@pytest.mark.parametrize("gidx", [None, "random", "sorted"])
def test_gptq(shape, gidx, monkeypatch):
    rng = np.random.default_rng(shape[0] + len(gidx or ""))
    n, k = shape
    t, bufs = affine_case(
        rng,
        "uint4",
        (n, k),
        1,
        64,
        (1, 0),
        Packing(32, 0),
        "uint4",
        Packing(32, 1),
        zp_offset=1,
        gidx=gidx is not None,
    )
    if gidx == "sorted":  # desc_act false: runs of equal entries
        q = t.descriptor.quantization
        g = (np.arange(k) // 64).astype("<i4")
        bufs = bufs[:3] + [g.tobytes()]
        t = type(t)(t.descriptor, bufs)
        assert q.group_index_buffer == 3
    if shape == SMALL:
        check(t, bufs)
    same_bytes(t, monkeypatch)


@pytest.mark.parametrize("shape", [SMALL, BIG])
def test_awq_random_lane_orders(shape, monkeypatch):
    rng = np.random.default_rng(17)
    for _ in range(2):
        order = tuple(int(x) for x in rng.permutation(8))
        t, bufs = affine_case(
            rng,
            "uint4",
            shape,
            1,
            128,
            (1, 0),
            Packing(32, 1, order),
            "uint4",
            Packing(32, 1, order),
        )
        same_bytes(t, monkeypatch)


@pytest.mark.parametrize("shape", [SMALL, BIG])
@pytest.mark.parametrize("dtype,block", [("uint4", 128), ("uint4", 48), ("uint8", 32)])
def test_compressed_tensors_group(shape, dtype, block, monkeypatch):
    rng = np.random.default_rng(block)
    t, bufs = affine_case(rng, dtype, shape, 1, block, None, Packing(32, 1), zero_point=8)
    same_bytes(t, monkeypatch)
    t, bufs = affine_case(
        rng, dtype, shape, 1, block, None, Packing(32, 1), "uint4", Packing(32, 0)
    )
    same_bytes(t, monkeypatch)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("shape", [SMALL, BIG])
def test_per_channel_either_axis(axis, shape, monkeypatch):
    rng = np.random.default_rng(axis)
    codes = rng.integers(0, 256, shape)
    scales = random_scales(rng, shape[axis], "float32")
    bufs = [pack_words(codes, 8, Packing(32, 1)), scales.tobytes()]
    q = PerChannelAffine(axis, 1, "float32", zero_point=128, code_packing=Packing(32, 1))
    same_bytes(tensor("uint8", shape, q, bufs, ["data", "scales"]), monkeypatch)


@pytest.mark.parametrize("dtype,word", [("int4", 16), ("int8", 32), ("int16", 32), ("uint4", 8)])
def test_signed_codes_storage_permutations(dtype, word, monkeypatch):
    rng = np.random.default_rng(word)
    lanes = word // {"int4": 4, "uint4": 4, "int8": 8, "int16": 16}[dtype]
    for trial in range(4):
        storage = tuple(int(x) for x in rng.permutation(3))
        a = int(rng.integers(0, 3))
        shape = [3, 5, 300]
        shape[storage[a]] = lanes * int(rng.integers(1, 40))
        order = tuple(int(x) for x in rng.permutation(lanes))
        t, bufs = affine_case(
            rng,
            dtype,
            tuple(shape),
            2,
            int(rng.integers(1, 70)),
            storage,
            Packing(word, a, order),
            "int8",
            None,
            zp_offset=int(rng.integers(-3, 4)),
            gidx=bool(trial % 2),
        )
        check(t, bufs)
        same_bytes(t, monkeypatch)


@pytest.mark.parametrize("scale_dtype", ["float16", "bfloat16"])
def test_scales_and_packed_zero_points_formed_in_parts(scale_dtype, monkeypatch):
    """Scales and zero points are formed in parts on the kernel's threads
    before the decode; 202,000 scales in 3 parts begin inside a row of the
    scale array, where the zero points' carried index must start. Zero
    points packed along either storage axis (GPTQ's, compressed-tensors'),
    half-precision scales of both kinds."""
    rng = np.random.default_rng(101)
    shape = (2000, 16 * 101)
    for storage, codes, zeros in (
        ((1, 0), Packing(32, 0), Packing(32, 1)),
        (None, Packing(32, 1), Packing(32, 0)),
    ):
        t, bufs = affine_case(
            rng,
            "uint4",
            shape,
            1,
            16,
            storage,
            codes,
            "uint4",
            zeros,
            zp_offset=1,
            scale_dtype=scale_dtype,
        )
        same_bytes(t, monkeypatch)


def test_zero_offset_beyond_the_int32_shortcut(monkeypatch):
    rng = np.random.default_rng(4)
    for off in ((1 << 23) + 5, -(1 << 24) - 3, 1 << 32):
        t, bufs = affine_case(rng, "uint4", SMALL, 1, 64, None, Packing(32, 1), zp_offset=off)
        check(t, bufs)
        same_bytes(t, monkeypatch)


@pytest.mark.parametrize("shape", [(300, 2100), (1100, 2100), (5, 7)])
def test_fp8_2d_blocks(shape, monkeypatch):
    rng = np.random.default_rng(shape[1])
    codes = rng.integers(0, 256, shape).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0
    sl = (-(-shape[0] // 128), -(-shape[1] // 128))
    scales = rng.uniform(1e-4, 1e-2, sl).astype(np.float32)
    bufs = [codes.tobytes(), scales.tobytes()]
    q = BlockAffine(0, 128, 1, "float32", axis2=1, block_size2=128)
    same_bytes(tensor("float8_e4m3fn", shape, q, bufs, ["data", "scales"]), monkeypatch)


@pytest.mark.parametrize("shape,block", [((33, 32), 64), ((1158, 2001), 64), ((3, 1000), 4096)])
def test_bnb_double_quant_one_flat_row(shape, block, monkeypatch):
    rng = np.random.default_rng(block)
    numel = shape[0] * shape[1]
    nblocks = -(-numel // block)
    codes = rng.integers(0, 16, numel + (numel & 1))
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)
    bufs = [
        packed.tobytes(),
        rng.integers(0, 256, nblocks).astype(np.uint8).tobytes(),
        np.sort(rng.uniform(-1, 1, 16)).astype(np.float32).tobytes(),
        np.sort(rng.uniform(-1, 1, 256)).astype(np.float32).tobytes(),
        rng.uniform(0.1, 3, -(-nblocks // 256)).astype(np.float32).tobytes(),
    ]
    q = Nf4(
        block,
        1,
        "uint8",
        code_packing=Packing(8, 0, (1, 0)),
        codebook_buffer=2,
        scale_codebook_buffer=3,
        super_scale_buffer=4,
        super_scale_dtype="float32",
        super_block_size=256,
        super_op="multiply",
        scale_offset=0.0132,
    )
    roles = ["data", "scales", "codebook", "codebook", "super_scales"]
    if numel & 1:
        pytest.skip("packing needs whole words")
    same_bytes(tensor("uint4", shape, q, bufs, roles), monkeypatch)


@pytest.mark.parametrize("shape", [(7, 50), (7, 51), (3, 33), (1031, 2064), (1031, 2063)])
@pytest.mark.parametrize("op", ["multiply", "divide"])
def test_nvfp4_odd_nibble_rows(shape, op, monkeypatch):
    rng = np.random.default_rng(shape[1])
    codes = rng.integers(0, 16, shape)
    scales = rng.uniform(0.1, 400, (shape[0], -(-shape[1] // 16))).astype(ml_dtypes.float8_e4m3fn)
    bufs = [pack_plain(codes, 4), scales.tobytes(), np.float32([1234.5]).tobytes()]
    q = BlockAffine(
        1, 16, 1, "float8_e4m3fn", super_scale_buffer=2, super_scale_dtype="float32", super_op=op
    )
    t = tensor("float4_e2m1fn", shape, q, bufs, ["data", "scales", "super_scales"])
    same_bytes(t, monkeypatch)


def test_the_scalar_level_gives_the_same_bytes():
    """The specialised runs use AVX2 loops where the process's SIMD level
    allows (src/quant/simd.h), so the cases above compare those with the
    generic loop; under HURRAY_SIMD=scalar (chosen once per process, hence
    the subprocess) the runs' plain C loops meet the same cases."""
    if os.environ.get("HURRAY_SIMD") == "scalar":
        pytest.skip("this process is at the scalar level already")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            __file__,
            "-k",
            "not scalar_level",
        ],
        env=dict(os.environ, HURRAY_SIMD="scalar"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout
