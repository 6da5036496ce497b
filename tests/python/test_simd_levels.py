"""HURRAY_SIMD forces the quantization kernels' instruction-set level
(docs/impl/c-ffi.md). Every level this CPU has must give the bytes the
scalar level gives: codes, scales and zero points of hurray.quantize, and
hurray dequantize into float32, float16 and bfloat16, for every scheme,
with partial last blocks, rows whose starts are odd nibbles or split 6-bit
groups, inputs and outputs offset by 1..63 bytes, and 1 and 4 threads; and
the GGUF block formats that have their own AVX2 decoders.

Each level runs in its own subprocess (the level is chosen once per
process), which also keeps a crash from taking pytest down.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

WORKER = r'''
import hashlib, json, sys
import numpy as np
import ml_dtypes
import hurray
import hurray._hurray as ext

out = {"level": ext._simd_level()}
rng = np.random.default_rng(20261201)

def misaligned(shape, dtype, shift):
    """An uninitialised C-contiguous array whose data starts `shift` bytes
    past a 64-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + shift
    return raw[start:start + nbytes].view(dtype).reshape(shape)

def data(shape, scheme):
    x = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 40.0, 3e4])).astype(np.float32)
    if x.size > 8:
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] *= 1e3
        if scheme.startswith("mx"):
            flat[rng.integers(0, flat.size)] = np.inf
            flat[rng.integers(0, flat.size)] = np.nan
    if scheme in ("q8_0", "q4_0"):  # their float16 block scales stop at 65504 (refused past it)
        np.clip(x, -5e5, 5e5, out=x)
    return x

CASES = [
    ("affine", {"dtype": "int8"}), ("affine", {"dtype": "uint8"}),
    ("affine", {"dtype": "int4"}), ("affine", {"dtype": "uint4", "symmetric": False}),
    ("per_channel", {"dtype": "int8", "axis": 0}), ("per_channel", {"dtype": "uint8", "axis": -1}),
    ("per_channel", {"dtype": "int4", "axis": 0}),
    ("block_affine", {"dtype": "int8"}), ("block_affine", {"dtype": "uint4", "block_size": 33}),
    ("block_affine", {"dtype": "int8", "axis": 0, "block_size": 5, "scale_dtype": "float16"}),
    ("block_affine", {"dtype": "int4", "scale_dtype": "bfloat16", "symmetric": False}),
    ("q8_0", {}), ("q4_0", {}), ("nf4", {}), ("nf4", {"block_size": 37}),
    ("nf4", {"block_size": 255}), ("block_affine", {"dtype": "uint4", "block_size": 129}),
    ("mxfp8_e4m3", {}), ("mxfp8_e5m2", {}), ("mxfp6_e3m2", {}), ("mxfp6_e2m3", {}),
    ("mxfp4", {}), ("mxint8", {}), ("mxfp6_e2m3", {"axis": 0}), ("mxfp4", {"axis": 0}),
]
SHAPES = [(1,), (7,), (3, 33), (5, 97), (13, 250), (64, 1003)]
BIG = (2100, 1100)  # above the 8 MiB at which kernels start a second thread

def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()

for ci, (scheme, kw) in enumerate(CASES):
    shapes = SHAPES + ([BIG] if ci % 3 == 0 or scheme in ("nf4", "mxfp6_e3m2", "q4_0") else [])
    for si, shape in enumerate(shapes):
        x = data(shape, scheme)
        src_dtype = [np.float32, np.float16, ml_dtypes.bfloat16][(ci + si) % 3]
        shift = 1 + (ci * 7 + si * 13) % 63
        xs = misaligned(shape, src_dtype, shift)
        if src_dtype is np.float16:
            x = np.where(np.isfinite(x), np.clip(x, -6e4, 6e4), x)
        xs[...] = x.astype(src_dtype)
        for threads in (1, 4) if shape == BIG else (1,):
            key = f"{scheme}{kw} {shape} {np.dtype(src_dtype).name} shift {shift} threads {threads}"
            try:
                t = hurray.quantize(xs, scheme, threads=threads, **kw)
            except hurray.HurrayError as e:
                out[key] = "error: " + type(e).__name__
                continue
            parts = [np.frombuffer(b, np.uint8) for b in t.buffers]
            parts.append(np.frombuffer(t.descriptor.encode(), np.uint8))
            for dt in (np.float32, np.float16, ml_dtypes.bfloat16):
                o = misaligned(shape, dt, 1 + (shift * 5) % 63)
                t.dequantize(dt, threads=threads, out=o)
                parts.append(o)
            out[key] = digest(*parts)
# GGUF block-coded formats with their own AVX2 decoders (ggml_blocks_x86.c; IQ1_M's
# float16 scale is spread over its scale nibbles, so any bytes will do):
# random block bytes with finite float16 scales at the formats' offsets,
# one row and several rows, 1 and 4 threads, every output dtype.
CODED = {"q5_0": (32, 22, [0]), "q5_1": (32, 24, [0, 2]), "q2_k": (256, 84, [80, 82]),
         "tq1_0": (256, 54, [52]), "tq2_0": (256, 66, [64]),
         "iq2_xxs": (256, 66, [0]), "iq2_xs": (256, 74, [0]), "iq2_s": (256, 82, [0]),
         "iq3_xxs": (256, 98, [0]), "iq3_s": (256, 110, [0]), "iq1_s": (256, 50, [0]),
         "iq1_m": (256, 56, []), "mxfp4": (32, 17, []), "nvfp4": (64, 36, []),
         "iq4_nl": (32, 18, [0])}
for fmt, (elements, nbytes, scale_at) in CODED.items():
    for rows, cols in ((1, elements), (3, 4 * elements), (600, 16 * elements)):
        blocks = rng.integers(0, 256, (rows * cols // elements, nbytes), dtype=np.uint8)
        for at in scale_at:
            s = (rng.standard_normal(len(blocks)) * 0.05).astype(np.float16)
            blocks[:, at:at + 2] = s.view(np.uint8).reshape(-1, 2)
        d = hurray.Descriptor("uint8", (rows, cols),
                              quantization=hurray.BlockCoded("ggml_" + fmt, 1),
                              buffers=[hurray.Buffer("data", blocks.nbytes, 1)])
        t = hurray.Tensor(d, [blocks.reshape(-1)])
        for threads in (1, 4):
            parts = [t.dequantize(dt, threads=threads)
                     for dt in (np.float32, np.float16, ml_dtypes.bfloat16)]
            out[f"{fmt} ({rows}, {cols}) threads {threads}"] = digest(*parts)
json.dump(out, sys.stdout)
'''


def available_levels() -> list[str]:
    if platform.machine() not in ("x86_64", "AMD64"):
        return ["scalar", "auto"]
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    levels = ["scalar", "auto"]
    if "sse4_1" in flags:
        levels.append("sse4.1")
    if {"avx2", "f16c"} <= flags:
        levels.append("avx2")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "f16c"} <= flags:
        levels.append("avx512")
    return levels


def run_level(level: str) -> dict[str, str]:
    env = dict(os.environ, HURRAY_SIMD=level)
    proc = subprocess.run(
        [sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"HURRAY_SIMD={level}: rc {proc.returncode}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def scalar_result() -> dict[str, str]:
    result = run_level("scalar")
    assert result["level"] == "scalar"
    return result


@pytest.mark.parametrize("level", [lv for lv in available_levels() if lv != "scalar"])
def test_level_matches_scalar(level: str, scalar_result: dict[str, str]) -> None:
    result = run_level(level)
    if level != "auto":
        assert result["level"] == level
    assert result.keys() == scalar_result.keys()
    differ = [k for k in scalar_result if k != "level" and result[k] != scalar_result[k]]
    assert not differ, f"{result['level']} differs from scalar on {len(differ)} cases: {differ[:5]}"
    errors = [k for k, v in scalar_result.items() if v.startswith("error")]
    # only the finite-input schemes refuse the MX-style inf/nan data, and they get none
    assert not errors, errors


def test_unknown_or_missing_level_falls_back() -> None:
    """An unknown name is the best level; a level above the CPU's is capped
    to the best one below it (never an illegal instruction)."""
    code = "import hurray._hurray as e; print(e._simd_level())"
    best = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, HURRAY_SIMD="auto"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    for value in ("bogus", "", "AVX512"):
        got = subprocess.run(
            [sys.executable, "-c", code],
            env=dict(os.environ, HURRAY_SIMD=value),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert got == best
    levels = available_levels()
    if platform.machine() in ("x86_64", "AMD64"):
        got = subprocess.run(
            [sys.executable, "-c", code],
            env=dict(os.environ, HURRAY_SIMD="neon"),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert got == best
        if "avx512" not in levels:
            got = subprocess.run(
                [sys.executable, "-c", code],
                env=dict(os.environ, HURRAY_SIMD="avx512"),
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            assert got == best
