#!/usr/bin/env python3
"""Dequantize throughput of the safetensors zoo's floating-point families
(issue 18) in hurray's C kernels, against each format's reference in the
same run: bitsandbytes' own dequantize_4bit on CPU for NF4/FP4 with double
quantization, and numpy copies of the published dequantizers (DeepSeek's
weight_dequant, ModelOpt's and compressed-tensors' NVFP4, transformers'
convert_moe_packed_tensors) for the others, whose packages do not install
here on CPU.

    .venv/bin/python bench/bench_zoo_float.py      (make bench-quant runs it)

Each tensor is built by the converter's own family module
(hurray/convert/zoo/) from the checkpoint tensors, so what is timed is the
tensor `hurray convert` writes. Figures are float32 GB/s of output (bytes
of the float32 result / seconds), best of QBENCH_REPS calls in one process;
the hurray result is checked bit for bit against the reference before any
clock starts.

Environment:
    QBENCH_ZOO_MIB  float32 output size in MiB per tensor (default 64)
    QBENCH_REPS     calls per measurement, best kept (default 5)
    QBENCH_OUT      results folder (default bench/results): zoo_float.md, .json
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))

import zoo_float_refs as R  # noqa: E402
from out_ratio import cell, out_vs_memcpy  # noqa: E402

import hurray  # noqa: E402
from hurray._tensor import from_numpy  # noqa: E402
from hurray.convert import zoo  # noqa: E402

MiB = 1 << 20


def _best(fn, reps):
    best = float("inf")
    out = None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _u8(a):
    return from_numpy(np.ascontiguousarray(a))


def _typed(a, dtype):
    import ml_dtypes

    return from_numpy(np.ascontiguousarray(a).view(getattr(ml_dtypes, dtype)))


def _build(family_name, members, qc):
    """The tensor `hurray convert` makes of one group: the registered
    family's build, then the converter's own assembly."""
    fam = next(f for f in zoo.FAMILIES if f.name == family_name)
    name = "w" + (f".{fam.output_name}" if fam.output_name else "")
    group = zoo.Group("w", name, members, qc, fam)
    return zoo._assemble(group, fam.build(group))[0]


def case_fp8_block(rng, n, k):
    codes = R.random_fp8(rng, (n, k))
    scale = (rng.random((-(-n // 128), -(-k // 128))) * 1e-2).astype(np.float32)
    members = {"weight": _typed(codes, "float8_e4m3fn"), "weight_scale_inv": from_numpy(scale)}
    t = _build("fp8", members, {"quant_method": "fp8", "weight_block_size": [128, 128]})
    return t, lambda: R.ref_fp8_block(codes, scale, 128, 128), "numpy (DeepSeek weight_dequant)"


def case_fp8_channel(rng, n, k):
    codes = R.random_fp8(rng, (n, k))
    scale = (rng.random((n, 1)) * 1e-2).astype(np.float32)
    members = {"weight": _typed(codes, "float8_e4m3fn"), "weight_scale": from_numpy(scale)}
    qc = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {
            "g": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}
        },
    }
    t = _build("compressed-tensors-fp8", members, qc)
    return t, lambda: R.ref_fp8_scaled(codes, scale), "numpy (compressed-tensors dequantize)"


def _nvfp4(rng, n, k, ct):
    packed = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
    scale = rng.integers(1, 0x7F, size=(n, k // 16), dtype=np.uint8)
    glob = np.array([np.float32(0.002)])
    members = {
        "weight_packed" if ct else "weight": _u8(packed),
        "weight_scale": _typed(scale, "float8_e4m3fn"),
        "weight_global_scale" if ct else "weight_scale_2": from_numpy(glob),
    }
    if ct:
        qc = {
            "quant_method": "compressed-tensors",
            "format": "nvfp4-pack-quantized",
            "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
        }
        t = _build("nvfp4-compressed-tensors", members, qc)
        return t, lambda: R.ref_nvfp4_ct(packed, scale, glob[0])
    qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    t = _build("nvfp4-modelopt", members, qc)
    return t, lambda: R.ref_nvfp4_modelopt(packed, scale, glob[0])


def case_nvfp4_modelopt(rng, n, k):
    t, ref = _nvfp4(rng, n, k, False)
    return t, ref, "numpy (ModelOpt NVFP4QTensor.dequantize)"


def case_nvfp4_ct(rng, n, k):
    t, ref = _nvfp4(rng, n, k, True)
    return t, ref, "numpy (compressed-tensors nvfp4 dequantize)"


def case_mxfp4(rng, n, k):
    e = 4
    n //= e
    blocks = rng.integers(0, 256, size=(e, n, k // 32, 16), dtype=np.uint8)
    scales = rng.integers(100, 140, size=(e, n, k // 32), dtype=np.uint8)
    members = {"blocks": _u8(blocks), "scales": _u8(scales)}
    t = _build("mxfp4", members, {"quant_method": "mxfp4"})
    return t, lambda: R.ref_mxfp4(blocks, scales), "numpy (transformers convert_moe_packed_tensors)"


def _bnb(rng, n, k, quant_type):
    import bitsandbytes.functional as F
    import torch

    torch.manual_seed(int(rng.integers(1 << 30)))
    w = torch.randn(n, k)
    qt, st = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type=quant_type)
    members = {"weight": _u8(qt.numpy())}
    for key, v in st.as_dict(packed=True).items():
        members["weight." + key] = from_numpy(np.ascontiguousarray(v.numpy()))
    t = _build("bitsandbytes", members, {"quant_method": "bitsandbytes", "load_in_4bit": True})
    return t, lambda: F.dequantize_4bit(qt, st).numpy(), "bitsandbytes dequantize_4bit (CPU)"


def case_bnb_nf4(rng, n, k):
    return _bnb(rng, n, k, "nf4")


def case_bnb_fp4(rng, n, k):
    return _bnb(rng, n, k, "fp4")


CASES = [
    ("fp8 128x128 block (DeepSeek)", case_fp8_block),
    ("fp8 per channel (compressed-tensors)", case_fp8_channel),
    ("bnb nf4 + double quant", case_bnb_nf4),
    ("bnb fp4 + double quant", case_bnb_fp4),
    ("nvfp4 (ModelOpt)", case_nvfp4_modelopt),
    ("nvfp4 (compressed-tensors)", case_nvfp4_ct),
    ("mxfp4 (gpt-oss)", case_mxfp4),
]


def main():
    mib = float(os.environ.get("QBENCH_ZOO_MIB", "64"))
    reps = int(os.environ.get("QBENCH_REPS", "5"))
    out_dir = os.environ.get("QBENCH_OUT", os.path.join(HERE, "results"))
    k = 4096
    n = max(128, int(mib * MiB / 4 / k) // 128 * 128)
    threads = os.cpu_count() or 1
    rng = np.random.default_rng(20261201)
    rows = []
    for label, make in CASES:
        t, ref, ref_name = make(rng, n, k)
        expect = ref()
        got = t.dequantize(threads=threads)
        # bitsandbytes' FP4 kernels give -0.0 where the stored quant_map has
        # +0.0 (tests/python/test_zoo_bnb.py): the sign of a zero is not judged
        same = R.bits_equal_but_zero_sign if label.startswith("bnb fp4") else R.bits_equal
        exact = same(got, expect)
        nbytes = got.size * 4
        del got, expect
        s1, _ = _best(lambda: t.dequantize(threads=1), reps)
        sn, _ = _best(lambda: t.dequantize(threads=threads), reps)
        sr, _ = _best(ref, max(1, min(reps, 3)))
        row = {
            "format": label,
            "shape": list(t.descriptor.shape),
            "hurray_1t_gbps": nbytes / s1 / 1e9,
            "hurray_gbps": nbytes / sn / 1e9,
            "threads": threads,
            "reference": ref_name,
            "reference_gbps": nbytes / sr / 1e9,
            "bit_exact": exact,
        }
        row["speedup"] = row["hurray_gbps"] / row["reference_gbps"]
        row["out"] = out_vs_memcpy(t, reps)
        rows.append(row)
        print(
            f"{label:38s} hurray {row['hurray_1t_gbps']:6.2f} GB/s (1 thread) "
            f"{row['hurray_gbps']:6.2f} ({threads}) | {ref_name}: {row['reference_gbps']:6.2f} "
            f"| x{row['speedup']:.1f} | bit-exact {exact} | out= {row['out']['ratio']:.2f} of memcpy",
            flush=True,
        )
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "zoo_float.json"), "w") as f:
        json.dump(
            {"mib": mib, "reps": reps, "hurray": hurray.__version__, "rows": rows}, f, indent=2
        )
    lines = [
        "# Safetensors zoo, floating-point families: dequantize throughput",
        "",
        f"float32 GB/s of output, best of {reps}; {mib:g} MiB per tensor; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
        "`python bench/bench_zoo_float.py`.",
        "",
        "out= / memcpy: dequantize into a reused float32 array on one thread against np.copyto of "
        "the same size, interleaved in one process, best of each (bench/out_ratio.py): issue 19's "
        "goal, every kind >= 0.50.",
        "",
        "| format | shape | hurray 1 thread | hurray all threads | reference | reference GB/s "
        "| speed-up | bit-exact | out= / memcpy, 1 thread (goal >= 0.50) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['format']} | {r['shape']} | {r['hurray_1t_gbps']:.2f} | "
            f"{r['hurray_gbps']:.2f} ({r['threads']}) | {r['reference']} | "
            f"{r['reference_gbps']:.2f} | {r['speedup']:.1f}x | {'yes' if r['bit_exact'] else 'NO'} | "
            f"{cell(r['out'])} |"
        )
    with open(os.path.join(out_dir, "zoo_float.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if not all(r["bit_exact"] for r in rows):
        raise SystemExit("a family's dequantization differs from its reference")


if __name__ == "__main__":
    main()
