"""Shared by the floating-point zoo tests (test_zoo_fp8, test_zoo_bnb,
test_zoo_nvfp4, test_zoo_mxfp4) and bench/bench_quant.py: checkpoint
folders written with safetensors' own writer, the CLI round trips, and
independent numpy references written from each format's published
definition (the formats' packages, where they install, are used by the
tests themselves)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np

# FP4 E2M1: code -> value (OCP MX v1.0; the same table in ModelOpt,
# compressed-tensors and gpt-oss).
FP4_VALUES = np.array(
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
    np.float32,
)


def fp8_e4m3_values() -> np.ndarray:
    """float32 value of each of the 256 F8_E4M3 (fn) bytes, from the
    definition: bias 7, subnormals, 0x7F/0xFF NaN."""
    out = np.empty(256, np.float32)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e = (b >> 3) & 0xF
        m = b & 7
        if e == 0xF and m == 7:
            out[b] = np.nan
        elif e == 0:
            out[b] = s * (m / 8.0) * 2.0**-6
        else:
            out[b] = s * (1 + m / 8.0) * 2.0 ** (e - 7)
    return out


FP8_E4M3 = fp8_e4m3_values()


def random_fp8(rng, shape) -> np.ndarray:
    """Random finite F8_E4M3 bytes (no NaN codes)."""
    b = rng.integers(0, 256, size=shape, dtype=np.uint8)
    return np.where((b & 0x7F) == 0x7F, b ^ 0x01, b).astype(np.uint8)


def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    a = np.ascontiguousarray(a, np.float32)
    b = np.ascontiguousarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def bits_equal_but_zero_sign(a: np.ndarray, b: np.ndarray) -> bool:
    """bits_equal after turning -0.0 into +0.0 (adding +0.0 does exactly
    that): for references that disagree with the stored code book only on
    the sign of a zero (bitsandbytes' FP4 kernels, test_zoo_bnb.py)."""
    zero = np.float32(0)
    return bits_equal(np.asarray(a, np.float32) + zero, np.asarray(b, np.float32) + zero)


# --- checkpoint folders -----------------------------------------------------


def torch_tensor(array: np.ndarray, dtype: str):
    """A torch tensor with the bytes of `array` and safetensors dtype `dtype`
    ("F8_E4M3", "U8", "F32", ...). Without torch, the test that asked skips."""
    import pytest

    torch = pytest.importorskip("torch")

    tdt = {
        "F8_E4M3": torch.float8_e4m3fn,
        "F8_E8M0": torch.float8_e8m0fnu,
        "U8": torch.uint8,
        "F32": torch.float32,
        "F16": torch.float16,
        "BF16": torch.bfloat16,
        "I32": torch.int32,
    }[dtype]
    a = np.ascontiguousarray(array)
    if a.dtype.kind == "f" and dtype in ("F16", "BF16"):
        return torch.from_numpy(a.astype(np.float32)).to(tdt)
    t = torch.from_numpy(a.view(np.uint8).copy()).view(tdt)
    return t.reshape(a.shape)


def write_folder(folder, tensors: dict, config: dict, shards: int = 1, extra: dict = None):
    """A model folder written with safetensors' own writer: `tensors`
    {name: torch tensor} in `shards` files (an index when more than one),
    config.json beside them. Returns the folder. Without safetensors, the
    test that asked skips."""
    import pytest

    save_file = pytest.importorskip("safetensors.torch").save_file

    os.makedirs(folder, exist_ok=True)
    names = sorted(tensors)
    if shards == 1:
        save_file(
            {n: tensors[n].contiguous() for n in names}, os.path.join(folder, "model.safetensors")
        )
    else:
        weight_map = {}
        for s in range(shards):
            part = names[s::shards]
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            save_file({n: tensors[n].contiguous() for n in part}, os.path.join(folder, fname))
            weight_map.update({n: fname for n in part})
        total = sum(tensors[n].numel() * tensors[n].element_size() for n in names)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            # as transformers' save_pretrained writes it
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for fname, text in (extra or {}).items():
        with open(os.path.join(folder, fname), "w") as f:
            f.write(text)
    return folder


def run_convert(*args, expect_ok=True):
    r = subprocess.run(
        [sys.executable, "-m", "hurray", "convert", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if expect_ok:
        assert r.returncode == 0, r.stderr + r.stdout
    return r


def read_safetensors(path) -> dict:
    """{name: (dtype string, shape, bytes)} straight from the file's header."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = (info["dtype"], tuple(info["shape"]), hashlib.sha256(body[a:b]).hexdigest())
    return out


def read_folder(folder) -> dict:
    out = {}
    for fname in sorted(os.listdir(folder)):
        if fname.endswith(".safetensors"):
            out.update(read_safetensors(os.path.join(folder, fname)))
    return out


def assert_same_tensors(a: dict, b: dict):
    assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))[:5]
    for name in a:
        assert a[name] == b[name], (name, a[name][:2], b[name][:2])


def round_trip(src_folder, work, expect_weights: dict, equal=None):
    """Folder -> hurray -> file and folder, both compared tensor by tensor
    (dtype, shape and bytes) with the source, and the folder file for file,
    byte for byte (shards, index, config.json); a one-file source comes
    back as the same file;
    --dequantize writes float32 [out, in] weights equal to `expect_weights`
    (by `equal`, bits_equal unless given).
    Returns the hurray path."""
    import hurray

    src_folder = str(src_folder)
    out = os.path.join(work, "model.hurray")
    run_convert(src_folder, out)
    original = read_folder(src_folder)
    back_file = os.path.join(work, "back.safetensors")
    run_convert(out, back_file)
    assert_same_tensors(original, read_safetensors(back_file))
    single = os.path.join(src_folder, "model.safetensors")
    if os.path.exists(single):
        with open(single, "rb") as f1, open(back_file, "rb") as f2:
            assert f1.read() == f2.read()
    back_dir = os.path.join(work, "back")
    run_convert(out, back_dir + os.sep)
    assert_same_tensors(original, read_folder(back_dir))
    # the folder comes back file for file: shards, index and config.json
    assert sorted(os.listdir(src_folder)) == sorted(os.listdir(back_dir))
    for fname in os.listdir(src_folder):
        with open(os.path.join(src_folder, fname), "rb") as f1:
            with open(os.path.join(back_dir, fname), "rb") as f2:
                assert f1.read() == f2.read(), fname
    deq = os.path.join(work, "deq.safetensors")
    run_convert(out, deq, "--dequantize")
    import ml_dtypes  # noqa: F401  (safetensors.numpy finds "bfloat16" only once it is imported)
    from safetensors.numpy import load_file

    values = load_file(deq)
    for name, ref in expect_weights.items():
        assert values[name].dtype == np.float32, (name, values[name].dtype)
        assert (equal or bits_equal)(values[name], ref), name
    del hurray
    return out


# --- numpy references, from the published definitions ----------------------


def ref_fp8_block(codes: np.ndarray, scale: np.ndarray, bn: int, bk: int) -> np.ndarray:
    """DeepSeek weight_dequant: f32(fp8) * scale_inv[i // bn, j // bk]."""
    n, k = codes.shape
    s = np.repeat(np.repeat(scale.astype(np.float32), bn, 0), bk, 1)[:n, :k]
    return FP8_E4M3[codes] * s


def ref_fp8_scaled(codes: np.ndarray, scale_full: np.ndarray) -> np.ndarray:
    return FP8_E4M3[codes] * scale_full.astype(np.float32)


def ref_mxfp4(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """transformers' convert_moe_packed_tensors in float32, before its final
    transpose(1, 2): [..., N, K] = lut[low nibble], lut[high nibble] in turn,
    times 2^(scale - 127)."""
    lo = FP4_VALUES[blocks & 0x0F]
    hi = FP4_VALUES[blocks >> 4]
    v = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], 32)
    e = scales.astype(np.int32) - 127
    with np.errstate(over="ignore"):  # 6 * 2^127 is +inf, as in the kernel
        v = np.ldexp(v, e[..., None]).astype(np.float32)
    return v.reshape(*blocks.shape[:-2], blocks.shape[-2] * 32)


def unpack_fp4_low_first(packed: np.ndarray) -> np.ndarray:
    lo = FP4_VALUES[packed & 0x0F]
    hi = FP4_VALUES[packed >> 4]
    return np.stack([lo, hi], axis=-1).reshape(packed.shape[0], packed.shape[1] * 2)


def ref_nvfp4_modelopt(packed, scale_fp8, scale_2, group=16) -> np.ndarray:
    """ModelOpt NVFP4QTensor.dequantize: per_block_scale = f32(scale) *
    weight_scale_2, then fp4 * per_block_scale."""
    per_block = FP8_E4M3[scale_fp8] * np.float32(scale_2)
    vals = unpack_fp4_low_first(packed)
    return vals * np.repeat(per_block, group, axis=1)[:, : vals.shape[1]]


def ref_nvfp4_ct(packed, scale_fp8, global_scale, group=16) -> np.ndarray:
    """compressed-tensors: scale = f32(weight_scale) / weight_global_scale,
    then fp4 * scale."""
    per_block = FP8_E4M3[scale_fp8] / np.float32(global_scale)
    vals = unpack_fp4_low_first(packed)
    return vals * np.repeat(per_block, group, axis=1)[:, : vals.shape[1]]


def ref_bnb_4bit(packed, absmax, quant_map, block, shape, nested=None) -> np.ndarray:
    """bitsandbytes' definition: nested absmax = nested_map[absmax] *
    nested_absmax[b // nested_block] + offset (float32); then
    quant_map[code] * absmax[i // block], the first code in the HIGH nibble."""
    if nested is not None:
        nmap, nabs, nblock, offset = nested
        idx = np.arange(absmax.size) // nblock
        absmax = (nmap[absmax] * nabs[idx]).astype(np.float32) + np.float32(offset)
    flat = packed.reshape(-1)
    codes = np.stack([flat >> 4, flat & 0x0F], axis=-1).reshape(-1)
    n = int(np.prod(shape))
    codes = codes[:n]
    vals = quant_map[codes] * absmax[np.arange(n) // block]
    return vals.astype(np.float32).reshape(shape)


def build_all(folder, family=None):
    """The grouped tensors of a model folder, through the converter's zoo
    source (hurray.convert.zoo): {hurray name: Tensor} for every tensor a
    family built. `family` is the module expected to have built them."""
    from hurray.convert._safetensors import _SafetensorsSource
    from hurray.convert.zoo import open_folder

    folder = str(folder)
    files = sorted(
        os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors")
    )
    src = open_folder(folder, _SafetensorsSource(files), False)
    try:
        out = {}
        for name in getattr(src, "_groups", {}):
            out[name] = src.get(name)
        return out
    finally:
        src.close()
