"""Independent numpy references for the int4/int8 safetensors zoo (GPTQ,
AWQ GEMM, compressed-tensors pack-quantized), written from the formats'
published definitions, not from hurray's code; plus the small helpers the
test files share: a safetensors writer and reader built from the format's
definition, model-folder builders and the CLI runner.

Every reference returns float32 [out_features, in_features] (torch's
orientation) computed as f32(scale) * f32(code - zero), the integer
difference exact, one rounding."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from typing import Dict, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


# --- unpacking, straight from the definitions --------------------------------


def _lanes(words: np.ndarray, bits: int) -> np.ndarray:
    """[..., W] int32 words -> [..., W, 32/bits] codes, lane j = bits
    [j*bits, (j+1)*bits) of the little-endian word."""
    w = words.view(np.uint32).astype(np.uint64)
    shifts = np.arange(0, 32, bits, dtype=np.uint64)
    return ((w[..., None] >> shifts) & ((1 << bits) - 1)).astype(np.int64)


def gptq_dequantize(qweight, qzeros, scales, g_idx=None, *, bits=4, group_size=128, v1=True):
    """GPTQ: qweight [K/L, N] packed along K (row k = lane k % L of word
    row k / L), qzeros [G, N/L] packed along N, v1 storing zero - 1."""
    lanes = 32 // bits
    k = qweight.shape[0] * lanes
    codes = _lanes(qweight, bits).transpose(0, 2, 1).reshape(k, -1)  # [K, N]
    zeros = _lanes(qzeros, bits).reshape(qzeros.shape[0], -1)  # [G, N]
    if v1:
        zeros = zeros + 1  # no wrap: a stored 15 is 16
    g = (
        np.asarray(g_idx, np.int64)
        if g_idx is not None
        else np.arange(k) // (k if group_size == -1 else group_size)
    )
    diff = (codes - zeros[g]).astype(np.float32)  # exact: |diff| < 2^9
    w = scales[g].astype(np.float32) * diff  # [K, N]
    return np.ascontiguousarray(w.T)


def awq_dequantize(qweight, qzeros, scales, *, group_size=128):
    """AWQ GEMM: qweight [K, N/8], nibble j of word c is column 8c + AWQ_ORDER[j]."""
    k = qweight.shape[0]

    def unpack(words):
        nib = _lanes(words, 4)  # [R, C, 8]
        out = np.empty_like(nib)
        out[..., list(AWQ_ORDER)] = nib
        return out.reshape(words.shape[0], -1)

    codes, zeros = unpack(qweight), unpack(qzeros)
    g = np.arange(k) // (k if group_size == -1 else group_size)
    w = scales[g].astype(np.float32) * (codes - zeros[g]).astype(np.float32)
    return np.ascontiguousarray(w.T)


def ct_dequantize(
    weight_packed,
    weight_scale,
    weight_shape,
    weight_zero_point=None,
    g_idx=None,
    *,
    bits=4,
    strategy="group",
    group_size=None,
):
    """compressed-tensors pack-quantized: codes along the last axis, low
    bits first, stored as q + 2^(b-1); packed zero points along axis 0,
    stored likewise; int8 zero points are the signed zero itself."""
    n, k = (int(x) for x in np.asarray(weight_shape).reshape(-1))
    half = 1 << (bits - 1)
    q = _lanes(weight_packed, bits).reshape(n, -1)[:, :k] - half
    scale = np.asarray(weight_scale).astype(np.float32)
    if strategy == "group":
        g = np.asarray(g_idx, np.int64) if g_idx is not None else np.arange(k) // group_size
        s = scale.reshape(n, -1)[:, g]
    elif strategy == "channel":
        s = np.repeat(scale.reshape(n, 1), k, axis=1)
    else:
        s = np.full((n, k), scale.reshape(-1)[0], np.float32)
    zp = np.zeros((n, k), np.int64)
    if weight_zero_point is not None:
        z = np.asarray(weight_zero_point)
        if z.dtype == np.int32 and strategy != "tensor":
            zz = _lanes(z.T.copy(), bits).reshape(z.shape[1], -1)[:, :n].T - half  # [N, G]
        else:
            zz = z.astype(np.int64).reshape(n if strategy != "tensor" else 1, -1)
        if strategy == "group":
            zp = zz[:, g]
        elif strategy == "channel":
            zp = np.repeat(zz.reshape(n, 1), k, axis=1)
        else:
            zp = np.full((n, k), zz.reshape(-1)[0], np.int64)
    return s * (q - zp).astype(np.float32)


# --- packing, for building checkpoints ---------------------------------------


def pack_along(codes: np.ndarray, bits: int, axis: int, order=None) -> np.ndarray:
    """Codes (0 <= c < 2^bits) packed into int32 words along `axis`, lane j
    holding element order[j] of each group of 32/bits."""
    lanes = 32 // bits
    c = np.moveaxis(np.asarray(codes, np.uint64), axis, -1)
    c = c.reshape(*c.shape[:-1], -1, lanes)
    if order is not None:
        c = c[..., list(order)]
    shifts = np.arange(0, 32, bits, dtype=np.uint64)
    words = (c << shifts).sum(axis=-1).astype(np.uint32).view(np.int32)
    return np.ascontiguousarray(np.moveaxis(words, -1, axis))


# --- safetensors, from its definition ----------------------------------------

_ST_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
_ST_NAMES = {np.dtype(v): k for k, v in _ST_DTYPES.items()}


def write_safetensors(path, tensors: Dict[str, np.ndarray], metadata=None, dtypes=None) -> None:
    """8-byte little-endian header size, the JSON header, the data, each
    tensor's bytes row-major little-endian. `dtypes` overrides the dtype
    label of a tensor (BF16 given as uint16 bits)."""
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    blobs = []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        label = (dtypes or {}).get(name) or _ST_NAMES[a.dtype]
        header[name] = {
            "dtype": label,
            "shape": list(a.shape),
            "data_offsets": [offset, offset + a.nbytes],
        }
        blobs.append(a.tobytes())
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path) -> Dict[str, tuple]:
    """{name: (dtype label, shape, bytes)} and "__metadata__" -> dict."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    out: Dict[str, tuple] = {}
    for name, e in header.items():
        if name == "__metadata__":
            out[name] = e
            continue
        a, b = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), raw[8 + n + a : 8 + n + b])
    return out


def read_folder(folder) -> Dict[str, tuple]:
    """Every tensor of every *.safetensors file in a folder."""
    out: Dict[str, tuple] = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            for k, v in read_safetensors(os.path.join(folder, f)).items():
                if k != "__metadata__":
                    assert k not in out, k
                    out[k] = v
    return out


def array_of(entry) -> np.ndarray:
    label, shape, raw = entry
    return np.frombuffer(raw, _ST_DTYPES[label]).reshape(shape)


def write_model(
    folder,
    tensors: Dict[str, np.ndarray],
    quantization_config: Optional[dict],
    shards: int = 1,
    dtypes=None,
) -> str:
    """A model folder: tensors in `shards` files (an index beside them when
    more than one), config.json with the quantization_config."""
    os.makedirs(folder, exist_ok=True)
    names = list(tensors)
    if shards == 1:
        write_safetensors(
            os.path.join(folder, "model.safetensors"), tensors, {"format": "pt"}, dtypes
        )
    else:
        weight_map = {}
        for i in range(shards):
            part = names[i::shards]
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(
                os.path.join(folder, fname), {n: tensors[n] for n in part}, {"format": "pt"}, dtypes
            )
            weight_map.update({n: fname for n in part})
        total = sum(np.asarray(a).nbytes for a in tensors.values())
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "float16",
    }
    if quantization_config is not None:
        config["quantization_config"] = quantization_config
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write(json.dumps(config, indent=2) + "\n")
    return folder


# --- the CLI -------------------------------------------------------------------


def cli():
    """The C `hurray` command (it hands these conversions to Python), or None."""
    for cand in (
        os.environ.get("HURRAY_CLI"),
        os.path.join(ROOT, "build", "hurray"),
        os.path.join(os.path.dirname(sys.executable), "hurray"),
        shutil.which("hurray"),
    ):
        if cand and os.path.exists(cand):
            return cand
    return None


def convert(*args, timeout=300):
    """`hurray convert ARGS` (the C command where built, else python -m
    hurray), with HURRAY_PYTHON set to this interpreter."""
    exe = cli()
    cmd = [exe, "convert"] if exe else [sys.executable, "-m", "hurray", "convert"]
    env = dict(os.environ, HURRAY_PYTHON=sys.executable)
    return subprocess.run(
        cmd + [str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env
    )


def assert_ok(r) -> None:
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)


def assert_one_line_failure(r, contains=None) -> None:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("hurray convert: "), lines[0]
    assert "internal error" not in lines[0], lines[0]
    if contains is not None:
        for word in [contains] if isinstance(contains, str) else contains:
            assert word in lines[0], lines[0]


def listing(folder):
    return sorted(os.listdir(folder))


def round_trip(tmp_path, src_folder, name: str, expect: Dict[str, np.ndarray], reference, shards=1):
    """The checks every family shares: convert the folder, compare the
    grouped tensor's dequantize() bit for bit with `reference` ({hurray
    tensor: float32 [N, K]}), convert back to a folder and compare every
    tensor's bytes, dtype, shape and config.json; then --dequantize."""
    import hurray

    out = tmp_path / f"{name}.hurray"
    assert_ok(convert(src_folder, out, "-q"))
    f = hurray.open(str(out))
    try:
        for tname, want in reference.items():
            t = f[tname]
            assert t.shape == want.shape, (tname, t.shape, want.shape)
            got = t.dequantize(np.float32)
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=tname)
            got4 = t.dequantize(np.float32, threads=4)
            np.testing.assert_array_equal(got4.view(np.uint32), want.view(np.uint32))
        meta = dict(f.metadata)
    finally:
        f.close()
    with open(os.path.join(src_folder, "config.json")) as fh:
        assert meta["zoo.config.json"] == fh.read()
    back = tmp_path / f"{name}-back"
    assert_ok(convert(out, f"{back}/", "-q"))
    src = read_folder(src_folder)
    got = read_folder(back)
    assert sorted(got) == sorted(src)
    for k in src:
        assert got[k] == src[k], k  # dtype label, shape, bytes
    with (
        open(os.path.join(src_folder, "config.json")) as a,
        open(os.path.join(back, "config.json")) as b,
    ):
        assert a.read() == b.read()
    if shards > 1:
        with (
            open(os.path.join(src_folder, "model.safetensors.index.json")) as a,
            open(os.path.join(back, "model.safetensors.index.json")) as b,
        ):
            assert json.load(a)["weight_map"] == json.load(b)["weight_map"]
    # the rest in-process (the CLI is the same code; a subprocess costs seconds)
    # one file, the same tensors
    single = tmp_path / f"{name}-back.safetensors"
    hurray.convert(str(out), str(single), quiet=True)
    one = read_safetensors(single)
    assert all(one[k] == src[k] for k in src)
    # --dequantize: float32 weights, config.json without quantization_config
    deq = tmp_path / f"{name}-deq"
    hurray.convert(str(out), f"{deq}/", quiet=True, dequantize=True)
    dense = read_folder(deq)
    for tname, want in reference.items():
        assert dense[tname][0] == "F32"
        np.testing.assert_array_equal(array_of(dense[tname]), want)
    with open(os.path.join(deq, "config.json")) as fh:
        assert "quantization_config" not in json.loads(fh.read())
    # straight from the folder too
    deq2 = tmp_path / f"{name}-deq.safetensors"
    hurray.convert(str(src_folder), str(deq2), quiet=True, dequantize=True)
    dense2 = read_safetensors(deq2)
    for tname, want in reference.items():
        np.testing.assert_array_equal(array_of(dense2[tname]), want)
    return meta
