#!/usr/bin/env python3
"""Dequantize throughput of the int4/int8 safetensors zoo (GPTQ, AWQ GEMM,
compressed-tensors pack-quantized): hurray's C kernel against the numpy
references of tests/python/zoo_reference.py and, where installed,
compressed-tensors' own decompress (torch), in the same run.

    .venv/bin/python bench/bench_zoo_int4.py      (part of make bench-quant)

Each case is one linear layer of random valid codes and float16 scales,
written as a model folder, converted with hurray.convert, then dequantized
from the memory-mapped .hurray file into a new float32 array (the call a
user makes), on one thread and on every core. The references dequantize
the same bytes. Figures are float32 output GB/s (1 GB = 1e9 bytes), the best
of ZBENCH_REPS runs; every result is checked equal to the numpy reference
first (the compressed-tensors one, in float16, to ours rounded once).

Environment:
    ZBENCH_MIB    float32 output per case in MiB (default 32)
    ZBENCH_REPS   repetitions (default 5)
    ZBENCH_OUT    results folder (default bench/results): zoo_int4.{md,json}
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from out_ratio import cell, out_vs_memcpy  # noqa: E402
from zoo_reference import (  # noqa: E402
    AWQ_ORDER,
    awq_dequantize,
    ct_dequantize,
    gptq_dequantize,
    pack_along,
    write_model,
)

import hurray  # noqa: E402

MiB = 1 << 20


def best(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _cases(k, n, rng):
    """{case: (members, quantization_config, numpy reference, ct reference or None)}"""
    g = 128
    codes = rng.integers(0, 16, (k, n))
    zeros = rng.integers(0, 16, (k // g, n))
    scales = (rng.standard_normal((k // g, n)) * 0.01).astype(np.float16)
    gidx = rng.permutation(np.arange(k) // g).astype(np.int32)
    out = {}
    m = {"qweight": pack_along(codes, 4, 0), "qzeros": pack_along(zeros, 4, 1), "scales": scales}
    qc = {"quant_method": "gptq", "bits": 4, "group_size": g, "desc_act": False, "sym": False}
    out["gptq int4 g128"] = (
        m,
        qc,
        lambda m=m: gptq_dequantize(m["qweight"], m["qzeros"], m["scales"]),
        None,
    )
    m2 = dict(m, g_idx=gidx)
    qc2 = dict(qc, desc_act=True)
    out["gptq int4 g128 act-order"] = (
        m2,
        qc2,
        lambda m=m2: gptq_dequantize(m["qweight"], m["qzeros"], m["scales"], m["g_idx"]),
        None,
    )
    m3 = {
        "qweight": pack_along(codes, 4, 1, AWQ_ORDER),
        "qzeros": pack_along(zeros, 4, 1, AWQ_ORDER),
        "scales": scales,
    }
    qc3 = {"quant_method": "awq", "bits": 4, "group_size": g, "version": "gemm", "zero_point": True}
    out["awq gemm int4 g128"] = (
        m3,
        qc3,
        lambda m=m3: awq_dequantize(m["qweight"], m["qzeros"], m["scales"]),
        None,
    )
    for bits, strategy, sym in ((4, "group", True), (4, "group", False), (8, "channel", True)):
        half = 1 << (bits - 1)
        q = rng.integers(-half, half, (n, k))
        groups = k // g if strategy == "group" else 1
        sc = (rng.standard_normal((n, groups)) * 0.01).astype(np.float16)
        mm = {
            "weight_packed": pack_along(q + half, bits, 1),
            "weight_scale": sc,
            "weight_shape": np.array([n, k], np.int64),
        }
        if not sym:
            mm["weight_zero_point"] = pack_along(rng.integers(0, 1 << bits, (n, groups)), bits, 0)
        w = {
            "num_bits": bits,
            "type": "int",
            "symmetric": sym,
            "strategy": strategy,
            "group_size": g if strategy == "group" else None,
        }
        qcc = {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "config_groups": {
                "group_0": {"targets": ["Linear"], "weights": w, "format": "pack-quantized"}
            },
        }
        name = f"compressed-tensors int{bits} {strategy}{'' if strategy != 'group' else ' g128'} {'sym' if sym else 'asym'}"
        out[name] = (
            mm,
            qcc,
            lambda mm=mm, bits=bits, strategy=strategy: ct_dequantize(
                mm["weight_packed"],
                mm["weight_scale"],
                mm["weight_shape"],
                mm.get("weight_zero_point"),
                bits=bits,
                strategy=strategy,
                group_size=g,
            ),
            (mm, w),
        )
    return out


def _ct_reference():
    """compressed-tensors' decompress, or None when it is not installed."""
    try:
        import torch
        from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
        from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    except ImportError:
        return None

    def prepare(mm, w):
        args = QuantizationArgs(**{k: v for k, v in w.items() if v is not None})
        scheme = QuantizationScheme(targets=["Linear"], weights=args)
        state = {k: torch.from_numpy(v) for k, v in mm.items()}
        return lambda: PackedQuantizationCompressor.decompress(state, scheme)["weight"]

    return prepare


# long: one loop over the cases, measuring and checking each, then the report
def main() -> None:
    mib = int(os.environ.get("ZBENCH_MIB", "32"))
    reps = int(os.environ.get("ZBENCH_REPS", "5"))
    out_dir = os.environ.get("ZBENCH_OUT", os.path.join(HERE, "results"))
    cores = os.cpu_count() or 1
    k = 4096
    n = max(128, (mib * MiB // 4 // k) // 128 * 128)
    rng = np.random.default_rng(0)
    ct = _ct_reference()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, (members, qc, ref, ct_case) in _cases(k, n, rng).items():
            folder = os.path.join(tmp, case.replace(" ", "_"))
            write_model(folder, {f"layer.{m}": a for m, a in members.items()}, qc)
            dst = folder + ".hurray"
            hurray.convert(folder, dst, quiet=True)
            t = hurray.load(dst)["layer.weight"]
            want = ref()
            assert np.array_equal(t.dequantize().view(np.uint32), want.view(np.uint32)), case
            out_bytes = want.size * 4
            t1 = best(lambda t=t: t.dequantize(threads=1), reps)
            tn = best(lambda t=t: t.dequantize(threads=cores), reps)
            tr = best(ref, max(1, reps // 2))
            row = {
                "case": case,
                "hurray_1t_gbs": out_bytes / t1 / 1e9,
                "hurray_all_gbs": out_bytes / tn / 1e9,
                "numpy_gbs": out_bytes / tr / 1e9,
                "ct_gbs": None,
            }
            if ct is not None and ct_case is not None:
                fn = ct(*ct_case)
                theirs = fn().numpy()
                assert np.array_equal(
                    want.astype(np.float16).view(np.uint16), theirs.view(np.uint16)
                ), case
                row["ct_gbs"] = (
                    out_bytes / best(fn, max(1, reps // 2)) / 1e9
                )  # float16 out, f32 counted
            row["out"] = out_vs_memcpy(t, reps)
            rows.append(row)
            ctg = f", compressed-tensors {row['ct_gbs']:.3f}" if row["ct_gbs"] else ""
            print(
                f"{case:40s} hurray 1 thread {row['hurray_1t_gbs']:6.2f} GB/s, {cores} threads "
                f"{row['hurray_all_gbs']:6.2f} GB/s, numpy {row['numpy_gbs']:.3f}{ctg}",
                flush=True,
            )
            del t
    os.makedirs(out_dir, exist_ok=True)
    meta = {
        "machine": platform.machine(),
        "cores": cores,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "shape": [n, k],
        "reps": reps,
    }
    with open(os.path.join(out_dir, "zoo_int4.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = [
        "# int4/int8 safetensors zoo dequantize: hurray (C) vs numpy references and compressed-tensors",
        "",
        f"float32 output GB/s (compressed-tensors: float16 output, the same element count), best "
        f"of {reps}; one {n}x{k} layer a case; {cores} cores, numpy {np.__version__}.",
        "",
        "out= / memcpy: dequantize into a reused float32 array on one thread against np.copyto of "
        "the same size, interleaved in one process, best of each (bench/out_ratio.py): issue 19's "
        "goal, every kind >= 0.50.",
        "",
        "| case | hurray 1 thread | hurray all cores | numpy reference | compressed-tensors | speedup vs numpy (1 thread) | out= / memcpy, 1 thread (goal >= 0.50) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ctv = f"{r['ct_gbs']:.3f}" if r["ct_gbs"] else "—"
        lines.append(
            f"| {r['case']} | {r['hurray_1t_gbs']:.2f} | {r['hurray_all_gbs']:.2f} | "
            f"{r['numpy_gbs']:.3f} | {ctv} | {r['hurray_1t_gbs'] / r['numpy_gbs']:.1f}x | "
            f"{cell(r['out'])} |"
        )
    with open(os.path.join(out_dir, "zoo_int4.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {out_dir}/zoo_int4.md")


if __name__ == "__main__":
    main()
