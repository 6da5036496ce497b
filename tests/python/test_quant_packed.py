"""Packed and two-level quantization (ADR-0024, docs/spec/quantization.md
§5.6): the C kernel bit-exact against an independent numpy implementation
of the spec's decode rule, on random inputs: storage axes, codes and zero
points packed in words with odd lane orders, signed codes, zero-point
offsets, group indices, 2-D blocks with partial edge blocks, codebooks,
scale codebooks and super scales (multiply and divide); plus the records'
round trips and the errors.

The reference below reads only the descriptor's dict form and the buffer
bytes; it shares no code with libhurray."""

import itertools

import ml_dtypes
import numpy as np
import pytest

import hurray
from hurray import BlockAffine, Buffer, Descriptor, Nf4, Packing, PerChannelAffine

BITS = {
    "int4": 4,
    "uint4": 4,
    "int8": 8,
    "uint8": 8,
    "int16": 16,
    "uint16": 16,
    "int32": 32,
    "uint32": 32,
    "float8_e4m3fn": 8,
    "float8_e5m2": 8,
    "float4_e2m1fn": 4,
}
SIGNED = {"int4", "int8", "int16", "int32"}
FLOATS = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float32": np.float32,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e8m0fnu": ml_dtypes.float8_e8m0fnu,
    "float4_e2m1fn": ml_dtypes.float4_e2m1fn,
}
NF4 = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230261325836,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    np.float32,
)


# ------------------------------------------------- the reference (spec §5.6)


def unpack_plain(raw, bits, count):
    """ADR-0012 elements: sub-byte ones low bits first in a bit stream."""
    if bits >= 8:
        return np.frombuffer(raw, f"<u{bits // 8}")[:count].astype(np.uint64)
    b = np.frombuffer(raw, np.uint8).astype(np.uint64)
    stream = np.unpackbits(b.astype(np.uint8), bitorder="little")
    idx = np.arange(count)[:, None] * bits + np.arange(bits)[None, :]
    return (stream[idx].astype(np.uint64) << np.arange(bits, dtype=np.uint64)).sum(axis=1)


def unpack_words(raw, bits, storage_shape, packing):
    """Elements of `storage_shape` from little-endian words: lane j of the
    word at s (s[axis] // lanes) holds element order[j] of its group."""
    wb, axis = packing["word_bits"], packing["axis"]
    lanes = wb // bits
    order = packing.get("order", list(range(lanes)))
    wshape = list(storage_shape)
    wshape[axis] //= lanes
    words = np.frombuffer(raw, f"<u{wb // 8}").astype(np.uint64).reshape(wshape)
    out = np.zeros(storage_shape, np.uint64)
    mask = np.uint64((1 << bits) - 1)
    for j in range(lanes):
        lane = (words >> np.uint64(j * bits)) & mask
        idx = [slice(None)] * len(storage_shape)
        idx[axis] = slice(order[j], None, lanes)
        out[tuple(idx)] = lane
    return out


def sign(values, dtype):
    bits = BITS[dtype]
    v = values.astype(np.int64)
    if dtype in SIGNED:
        v = np.where(v >= 1 << (bits - 1), v - (1 << bits), v)
    return v


def read_array(raw, dtype, shape, packing):
    n = int(np.prod(shape))
    if packing is not None:
        return unpack_words(raw, BITS[dtype], shape, packing).reshape(shape)
    return unpack_plain(raw, BITS[dtype], n).reshape(shape)


def floats(raw, dtype, n):
    if dtype in ("float4_e2m1fn",):
        codes = unpack_plain(raw, 4, n).astype(np.uint8)
        return codes.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    return np.frombuffer(raw, FLOATS[dtype])[:n].astype(np.float32)


def reference(d, bufs):
    """float32 values of a descriptor (its dict form) and its buffers."""
    q = d["quantization"]
    shape = tuple(d["shape"])
    rank = len(shape)
    dtype = d["dtype"]
    nf4 = q["kind"] == "nf4"
    axes = q.get("storage_axes", list(range(rank)))
    inverse = list(np.argsort(axes))
    data = bufs[d["layout"]["data_buffer"]]
    view_shape = (int(np.prod(shape)),) if nf4 else tuple(shape[a] for a in axes)
    codes = read_array(data, dtype, view_shape, q.get("code_packing"))
    codes = codes.reshape(-1) if nf4 else np.transpose(codes, inverse)
    # scales in storage order, formed
    if nf4:
        sshape_logical = (-(-int(np.prod(shape)) // q["block_size"]),)
        sbuf, sdtype = bufs[q["absmax_buffer"]], q["absmax_dtype"]
    elif q["kind"] == "per_channel_affine":
        sshape_logical = (shape[q["axis"]],)
        sbuf, sdtype = bufs[q["scale_buffer"]], q["scale_dtype"]
    else:
        sl = list(shape)
        sl[q["axis"]] = -(-shape[q["axis"]] // q["block_size"])
        if q.get("block_size2"):
            sl[q["axis2"]] = -(-shape[q["axis2"]] // q["block_size2"])
        sshape_logical = tuple(sl)
        sbuf, sdtype = bufs[q["scale_buffer"]], q["scale_dtype"]
    block_like = q["kind"] == "block_affine"
    sshape = tuple(sshape_logical[a] for a in axes) if block_like else sshape_logical
    ns = int(np.prod(sshape))
    if "scale_codebook_buffer" in q:
        cb = np.frombuffer(bufs[q["scale_codebook_buffer"]], np.float32)
        v = cb[np.frombuffer(sbuf, np.uint8)[:ns]]
    else:
        v = floats(sbuf, sdtype, ns)
    if "super_scale_buffer" in q:
        sup = floats(bufs[q["super_scale_buffer"]], q["super_scale_dtype"], 1 << 30)
        k = np.arange(ns) // q["super_block_size"] if q.get("super_block_size") else 0
        v = v / sup[k] if q["super_op"] == "divide" else v * sup[k]
    if q.get("scale_offset", 0):
        v = v + np.float32(q["scale_offset"])
    v = v.astype(np.float32).reshape(sshape)
    zero = None
    if not nf4 and "codebook_buffer" not in q and dtype not in FLOATS:
        if q.get("zero_point_buffer") is not None:
            z = read_array(
                bufs[q["zero_point_buffer"]],
                q["zero_point_dtype"],
                sshape,
                q.get("zero_point_packing"),
            )
            z = sign(z, q["zero_point_dtype"])
        else:
            z = np.full(sshape, q.get("zero_point", 0), np.int64)
        zero = z + q.get("zero_point_offset", 0)
    if block_like:
        v = np.transpose(v, inverse)
        zero = None if zero is None else np.transpose(zero, inverse)
    # gather per element
    if nf4:
        g = np.arange(codes.size) // q["block_size"]
        scale_e, zero_e = v[g], None
    elif q["kind"] == "per_channel_affine":
        bshape = [1] * rank
        bshape[q["axis"]] = shape[q["axis"]]
        scale_e = np.broadcast_to(v.reshape(bshape), shape)
        zero_e = None if zero is None else np.broadcast_to(zero.reshape(bshape), shape)
    else:
        pos = np.arange(shape[q["axis"]])
        if q.get("group_index_buffer") is not None:
            g = np.frombuffer(bufs[q["group_index_buffer"]], "<i4")
        else:
            g = pos // q["block_size"]
        scale_e = np.take(v, g, axis=q["axis"])
        zero_e = None if zero is None else np.take(zero, g, axis=q["axis"])
        if q.get("block_size2"):
            g2 = np.arange(shape[q["axis2"]]) // q["block_size2"]
            scale_e = np.take(scale_e, g2, axis=q["axis2"])
            zero_e = None if zero_e is None else np.take(zero_e, g2, axis=q["axis2"])
    if "codebook_buffer" in q:
        values = np.frombuffer(bufs[q["codebook_buffer"]], np.float32)[codes.astype(np.int64)]
    elif nf4:
        values = NF4[codes.astype(np.int64)]
    elif dtype in FLOATS:
        values = codes.astype(np.uint8).view(FLOATS[dtype]).astype(np.float32)
    else:
        diff = sign(codes, dtype) - (0 if zero_e is None else zero_e)
        values = diff.astype(np.float32)
    out = (values * scale_e).astype(np.float32)
    return out.reshape(shape)


# --------------------------------------------------------------- builders


def pack_words(elements, bits, packing):
    """The inverse of unpack_words, for making inputs."""
    wb, axis = packing.word_bits, packing.axis
    lanes = wb // bits
    order = packing.order or tuple(range(lanes))
    elements = np.asarray(elements).astype(np.uint64) & np.uint64((1 << bits) - 1)
    wshape = list(elements.shape)
    wshape[axis] //= lanes
    words = np.zeros(wshape, np.uint64)
    for j in range(lanes):
        idx = [slice(None)] * elements.ndim
        idx[axis] = slice(order[j], None, lanes)
        words |= elements[tuple(idx)] << np.uint64(j * bits)
    return words.astype(f"<u{wb // 8}").tobytes()


def pack_plain(elements, bits):
    e = np.asarray(elements).reshape(-1).astype(np.uint64) & np.uint64((1 << bits) - 1)
    if bits >= 8:
        return e.astype(f"<u{bits // 8}").tobytes()
    stream = ((e[:, None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
    return np.packbits(stream.reshape(-1), bitorder="little").tobytes()


def store(elements, dtype, packing):
    return (
        pack_plain(elements, BITS[dtype])
        if packing is None
        else pack_words(elements, BITS[dtype], packing)
    )


def tensor(dtype, shape, quant, bufs, roles):
    d = Descriptor(
        dtype, shape, quantization=quant, buffers=[Buffer(r, len(b)) for r, b in zip(roles, bufs)]
    )
    d.validate()
    return hurray.Tensor(d, bufs)


def check(t, bufs, threads=1):
    want = reference(t.descriptor.to_dict(), bufs)
    got = t.dequantize(threads=threads)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # float16/bfloat16 are the float32 results rounded once
    for name, np_dtype in (("float16", np.float16), ("bfloat16", ml_dtypes.bfloat16)):
        narrow = t.dequantize(np_dtype)
        with np.errstate(over="ignore"):  # large values round to inf in float16, as in C
            expected = want.astype(np_dtype)
        np.testing.assert_array_equal(
            narrow.view(np.uint16), expected.view(np.uint16), err_msg=name
        )
    return got


def random_scales(rng, n, dtype="float16"):
    x = rng.uniform(0.01, 2.0, n) * rng.choice([-1, 1], n)
    return np.asarray(x.astype(FLOATS[dtype]))


def affine_case(
    rng,
    dtype,
    shape,
    axis,
    block,
    storage,
    code_packing,
    zp_dtype=None,
    zp_packing=None,
    zp_offset=0,
    gidx=False,
    block2=None,
    scale_dtype="float16",
    zero_point=0,
):
    """A block-affine tensor with random codes, scales, zero points."""
    rank = len(shape)
    axes = storage or tuple(range(rank))
    bits = BITS[dtype]
    lo, hi = (-(1 << (bits - 1)), 1 << (bits - 1)) if dtype in SIGNED else (0, 1 << bits)
    codes = rng.integers(lo, hi, shape)
    sl = list(shape)
    sl[axis] = -(-shape[axis] // block)
    if block2:
        sl[block2[0]] = -(-shape[block2[0]] // block2[1])
    sshape = tuple(sl[a] for a in axes)
    bufs = [
        store(np.transpose(codes, axes), dtype, code_packing),
        random_scales(rng, int(np.prod(sshape)), scale_dtype).tobytes(),
    ]
    roles = ["data", "scales"]
    kw = {}
    if zp_dtype is not None:
        zb = BITS[zp_dtype]
        zlo, zhi = (-(1 << (zb - 1)), 1 << (zb - 1)) if zp_dtype in SIGNED else (0, 1 << zb)
        zeros = rng.integers(zlo, zhi, sshape)
        bufs.append(store(zeros, zp_dtype, zp_packing))
        roles.append("zero_points")
        kw.update(zero_point_buffer=2, zero_point_dtype=zp_dtype, zero_point_packing=zp_packing)
    if gidx:
        g = rng.integers(0, sl[axis], shape[axis]).astype("<i4")
        kw.update(group_index_buffer=len(bufs), group_index_dtype="int32")
        bufs.append(g.tobytes())
        roles.append("group_index")
    if block2:
        kw.update(axis2=block2[0], block_size2=block2[1])
    q = BlockAffine(
        axis,
        block,
        1,
        scale_dtype,
        storage_axes=storage,
        code_packing=code_packing,
        zero_point_offset=zp_offset,
        zero_point=zero_point,
        **kw,
    )
    return tensor(dtype, shape, q, bufs, roles), bufs


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("seed", range(4))
def test_gptq_like_storage_axes_packing_gidx_and_offset(seed):
    rng = np.random.default_rng(seed)
    n, k, g = 24, 128, 32
    t, bufs = affine_case(
        rng,
        "uint4",
        (n, k),
        1,
        g,
        (1, 0),
        Packing(32, 0),
        "uint4",
        Packing(32, 1),
        zp_offset=1,
        gidx=True,
    )
    check(t, bufs)


def test_awq_lane_order():
    rng = np.random.default_rng(7)
    order = (0, 2, 4, 6, 1, 3, 5, 7)
    t, bufs = affine_case(
        rng, "uint4", (16, 64), 1, 32, (1, 0), Packing(32, 1, order), "uint4", Packing(32, 1, order)
    )
    assert t.descriptor.quantization.code_packing == Packing(32, 1, order)
    check(t, bufs)
    # the lane order matters: the identity gives other values
    q = t.descriptor.quantization
    d2 = t.descriptor.replace(
        quantization=q.__class__(
            **{**{f: getattr(q, f) for f in q.__match_args__}, "code_packing": Packing(32, 1)}
        )
    )
    assert not np.array_equal(hurray.Tensor(d2, bufs).dequantize(), t.dequantize())


@pytest.mark.parametrize(
    "dtype,word,zp_dtype",
    [
        ("int4", 16, "int4"),
        ("int4", 8, "uint8"),
        ("uint8", 32, "uint8"),
        ("int8", 16, "int8"),
        ("uint4", 32, "int4"),
        ("int16", 32, "int16"),
    ],
)
def test_signed_codes_and_random_lane_orders(dtype, word, zp_dtype):
    rng = np.random.default_rng(hash((dtype, word)) % 1000)
    lanes = word // BITS[dtype]
    for trial in range(3):
        shape = (2 * lanes, 3, 3 * lanes)
        storage = tuple(rng.permutation(3))
        axis_storage = int(rng.integers(0, 3))
        logical = storage[axis_storage]
        shape = list(shape)
        shape[logical] = lanes * int(rng.integers(1, 4))
        order = tuple(int(x) for x in rng.permutation(lanes))
        zlanes = max(word // BITS[zp_dtype], 1)
        zp_pack = None
        block = int(rng.integers(1, 5))
        sl = list(shape)
        sl[2] = -(-shape[2] // block)
        sstorage = [sl[a] for a in storage]
        if zlanes > 1 and word > BITS[zp_dtype]:
            cands = [m for m in range(3) if sstorage[m] % zlanes == 0]
            if cands:
                zp_pack = Packing(word, cands[0], tuple(int(x) for x in rng.permutation(zlanes)))
        t, bufs = affine_case(
            rng,
            dtype,
            tuple(shape),
            2,
            block,
            storage,
            Packing(word, axis_storage, order),
            zp_dtype,
            zp_pack,
            zp_offset=int(rng.integers(-3, 4)),
            gidx=bool(trial % 2),
        )
        check(t, bufs)


def test_inline_zero_point_with_offset_and_no_zero_buffer():
    rng = np.random.default_rng(3)
    t, bufs = affine_case(
        rng, "uint4", (8, 64), 1, 16, None, Packing(32, 1), zp_offset=3, zero_point=5
    )
    check(t, bufs)


@pytest.mark.parametrize(
    "shape,blocks", [((200, 300), (128, 128)), ((130, 129), (64, 32)), ((5, 7), (2, 3))]
)
def test_fp8_two_d_blocks_with_partial_edges(shape, blocks):
    rng = np.random.default_rng(sum(shape))
    codes = rng.integers(0, 256, shape).astype(np.uint8)
    codes[(codes & 0x7F) == 0x7F] = 0  # no NaN codes: a NaN compares unequal
    sl = (-(-shape[0] // blocks[0]), -(-shape[1] // blocks[1]))
    scales = rng.uniform(1e-4, 1e-2, sl).astype(np.float32)
    bufs = [codes.tobytes(), scales.tobytes()]
    q = BlockAffine(0, blocks[0], 1, "float32", axis2=1, block_size2=blocks[1])
    t = tensor("float8_e4m3fn", shape, q, bufs, ["data", "scales"])
    got = check(t, bufs)
    want = (
        codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
        * np.repeat(np.repeat(scales, blocks[0], 0), blocks[1], 1)[: shape[0], : shape[1]]
    )
    np.testing.assert_array_equal(got, want)


def test_fp8_storage_axes_with_two_d_blocks():
    rng = np.random.default_rng(11)
    shape = (6, 10, 4)
    codes = rng.integers(0, 0x7E, shape).astype(np.uint8)
    storage = (2, 0, 1)
    sl = [3, 10, 2]  # axis 0 block 2, axis 2 block 3 (partial)
    scales = rng.uniform(0.5, 2, [sl[a] for a in storage]).astype(np.float32)
    bufs = [np.transpose(codes, storage).tobytes(), scales.tobytes()]
    q = BlockAffine(0, 2, 1, "float32", axis2=2, block_size2=3, storage_axes=storage)
    check(tensor("float8_e5m2", shape, q, bufs, ["data", "scales"]), bufs)


@pytest.mark.parametrize("super_block", [0, 1, 3, 256])
def test_bnb_double_quant_codebook_scale_codebook_super_and_offset(super_block):
    rng = np.random.default_rng(super_block)
    shape, block = (33, 32), 64  # 1056 elements: the last block is partial
    numel = shape[0] * shape[1]
    nblocks = -(-numel // block)
    codes = rng.integers(0, 16, numel)
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)  # high nibble first
    quant_map = np.sort(rng.uniform(-1, 1, 16)).astype(np.float32)
    nested_map = np.sort(rng.uniform(-1, 1, 256)).astype(np.float32)
    absmax_codes = rng.integers(0, 256, nblocks).astype(np.uint8)
    nsuper = -(-nblocks // super_block) if super_block else 1
    nested_absmax = rng.uniform(0.1, 3, nsuper).astype(np.float32)
    bufs = [
        packed.tobytes(),
        absmax_codes.tobytes(),
        quant_map.tobytes(),
        nested_map.tobytes(),
        nested_absmax.tobytes(),
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
        super_block_size=super_block,
        super_op="multiply",
        scale_offset=0.0132,
    )
    t = tensor("uint4", shape, q, bufs, ["data", "scales", "codebook", "codebook", "super_scales"])
    got = check(t, bufs)
    # as bitsandbytes forms it: absmax = nested_map[code] * nested_absmax + offset
    k = np.arange(nblocks) // super_block if super_block else np.zeros(nblocks, int)
    absmax = nested_map[absmax_codes] * nested_absmax[k] + np.float32(0.0132)
    want = quant_map[codes] * np.repeat(absmax, block)[:numel]
    np.testing.assert_array_equal(got.reshape(-1), want.astype(np.float32))


@pytest.mark.parametrize("op", ["multiply", "divide"])
@pytest.mark.parametrize("super_dtype", ["float32", "float16", "bfloat16"])
def test_nvfp4_super_scale_both_ops(op, super_dtype):
    rng = np.random.default_rng(5)
    shape = (16, 64)
    codes = rng.integers(0, 16, shape)
    scales = rng.uniform(0.1, 400, (16, 4)).astype(ml_dtypes.float8_e4m3fn)
    glob = np.asarray([rng.uniform(100, 3000)], FLOATS[super_dtype])
    bufs = [pack_plain(codes, 4), scales.tobytes(), glob.tobytes()]
    q = BlockAffine(
        1, 16, 1, "float8_e4m3fn", super_scale_buffer=2, super_scale_dtype=super_dtype, super_op=op
    )
    t = tensor("float4_e2m1fn", shape, q, bufs, ["data", "scales", "super_scales"])
    got = check(t, bufs)
    s = scales.astype(np.float32)
    g = glob.astype(np.float32)[0]
    formed = s / g if op == "divide" else s * g
    values = codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    np.testing.assert_array_equal(got, values * np.repeat(formed, 16, 1))


def test_per_channel_with_packing_and_zero_offset():
    rng = np.random.default_rng(9)
    shape = (16, 40)
    codes = rng.integers(0, 16, shape)
    scales = random_scales(rng, 16, "float32")
    zeros = rng.integers(0, 16, 16)
    bufs = [
        pack_words(codes, 4, Packing(32, 1)),
        scales.tobytes(),
        pack_words(zeros, 4, Packing(32, 0)),
    ]
    q = PerChannelAffine(
        0,
        1,
        "float32",
        zero_point_buffer=2,
        zero_point_dtype="uint4",
        code_packing=Packing(32, 1),
        zero_point_packing=Packing(32, 0),
        zero_point_offset=8,
    )
    t = tensor("uint4", shape, q, bufs, ["data", "scales", "zero_points"])
    got = check(t, bufs)
    want = (codes - (zeros + 8)[:, None]).astype(np.float32) * scales[:, None]
    np.testing.assert_array_equal(got, want)


def test_threads_give_the_same_bytes():
    rng = np.random.default_rng(1)
    t, bufs = affine_case(
        rng,
        "uint4",
        (512, 4096),
        1,
        128,
        (1, 0),
        Packing(32, 0),
        "uint4",
        Packing(32, 1),
        zp_offset=1,
        gidx=True,
    )
    one = t.dequantize(threads=1)
    many = t.dequantize(threads=4)
    np.testing.assert_array_equal(one.view(np.uint32), many.view(np.uint32))
    np.testing.assert_array_equal(
        one.view(np.uint32), reference(t.descriptor.to_dict(), bufs).view(np.uint32)
    )


def test_group_index_out_of_range_is_a_clean_error():
    rng = np.random.default_rng(2)
    t, bufs = affine_case(rng, "uint4", (8, 64), 1, 16, (1, 0), Packing(32, 0), gidx=True)
    g = np.frombuffer(bufs[2], "<i4").copy()
    for bad in (4, -1, 2**31 - 1):
        g[37] = bad
        bad_bufs = bufs[:2] + [g.tobytes()]
        u = hurray.Tensor(t.descriptor, bad_bufs)
        with pytest.raises(hurray.PlacementError) as info:
            u.dequantize()
        assert info.value.status_name == "HURRAY_ERR_QUANT_GROUP_INDEX"
        assert "group_index_buffer" in str(info.value) and "37" in str(info.value)


def test_group_index_of_a_tensor_without_elements_is_checked_too():
    """An empty tensor returned at once, so its group index was never
    checked: (0, 4) with entries outside its 2 groups decoded as a clean
    empty array, where (1, 4) failed. Spec §5.6: a decoder fails on any
    entry outside [0, G)."""
    q = BlockAffine(1, 2, 1, "float32", group_index_buffer=2, group_index_dtype="int32")

    def empty(entries):
        d = hurray.Descriptor(
            "uint4",
            (0, 4),
            quantization=q,
            buffers=[
                hurray.Buffer("data", 0),
                hurray.Buffer("scales", 0),
                hurray.Buffer("group_index", 16),
            ],
        )
        return hurray.Tensor(d, [b"", b"", np.array(entries, "<i4").tobytes()])

    with pytest.raises(hurray.PlacementError, match="entry 1 is -1") as info:
        empty([0, -1, 1, 1]).dequantize()
    assert info.value.status_name == "HURRAY_ERR_QUANT_GROUP_INDEX"
    assert empty([0, 1, 1, 0]).dequantize().shape == (0, 4)


# ----------------------------------------------------- records and rules


def test_records_round_trip_through_dict_json_and_encoding():
    rng = np.random.default_rng(4)
    t, _ = affine_case(
        rng,
        "int4",
        (16, 64),
        1,
        16,
        (1, 0),
        Packing(16, 0, (3, 1, 0, 2)),
        "uint8",
        None,
        zp_offset=-2,
        gidx=True,
    )
    d = t.descriptor
    for other in (Descriptor.from_dict(d.to_dict()), Descriptor.decode(d.encode())):
        assert other == d
        assert other.quantization == d.quantization
        assert other.to_json() == d.to_json()
    q = d.quantization
    assert q.storage_axes == (1, 0)
    assert q.code_packing == Packing(16, 0, (3, 1, 0, 2))
    assert q.zero_point_offset == -2 and q.group_index_dtype == "int32"
    js = d.to_dict()["quantization"]
    assert js["code_packing"] == {"word_bits": 16, "axis": 0, "order": [3, 1, 0, 2]}
    assert "scale_offset" not in js and "super_op" not in js  # defaults omitted


def test_identity_order_is_none_and_omitted():
    q = BlockAffine(1, 16, 1, storage_axes=(1, 0), code_packing=Packing(32, 0, tuple(range(8))))
    d = Descriptor(
        "uint4", (4, 32), quantization=q, buffers=[Buffer("data", 64), Buffer("scales", 16)]
    )
    assert d.to_dict()["quantization"]["code_packing"] == {"word_bits": 32, "axis": 0}
    assert Descriptor.decode(d.encode()).quantization.code_packing == Packing(32, 0)


def _validation(dtype, shape, quant, sizes_roles):
    d = Descriptor(dtype, shape, quantization=quant, buffers=[Buffer(r, n) for n, r in sizes_roles])
    with pytest.raises(hurray.ValidationError) as info:
        d.validate()
    return info.value.status_name.removeprefix("HURRAY_ERR_")


def test_validation_rules():
    base = [(64, "data"), (16, "scales")]
    # lanes that do not divide the packed axis
    assert (
        _validation(
            "uint4",
            (4, 36),
            BlockAffine(1, 36, 1, code_packing=Packing(32, 1)),
            [(72, "data"), (8, "scales")],
        )
        == "QUANT_PACKING"
    )
    # storage axes not a permutation: refused when built (the decoder
    # refuses them, so no descriptor holding them can exist)
    with pytest.raises(hurray.ValidationError, match="not a permutation"):
        Descriptor(
            "uint4",
            (4, 32),
            quantization=BlockAffine(1, 16, 1, storage_axes=(0, 0)),
            buffers=[Buffer(r, n) for n, r in base],
        )
    # group index on per-channel: refused by the kind
    assert (
        _validation(
            "uint4",
            (4, 32),
            BlockAffine(1, 16, 1, group_index_buffer=2, group_index_dtype="int64"),
            base + [(256, "group_index")],
        )
        == "QUANT_FIELD"
    )
    # group index of the wrong size
    assert (
        _validation(
            "uint4",
            (4, 32),
            BlockAffine(1, 16, 1, group_index_buffer=2, group_index_dtype="int32"),
            base + [(64, "group_index")],
        )
        == "QUANT_FIELD"
    )
    # a codebook with a zero point
    assert (
        _validation(
            "uint4",
            (4, 32),
            BlockAffine(1, 16, 1, zero_point=3, codebook_buffer=2),
            base + [(64, "codebook")],
        )
        == "QUANT_FIELD"
    )
    # a scale codebook needs uint8 scales
    assert (
        _validation(
            "uint4",
            (4, 32),
            BlockAffine(1, 16, 1, scale_codebook_buffer=2),
            base + [(1024, "codebook")],
        )
        == "QUANT_SCALE_DTYPE"
    )
    # super scales of the wrong count
    assert (
        _validation(
            "uint4",
            (4, 32),
            BlockAffine(
                1, 16, 1, super_scale_buffer=2, super_scale_dtype="float32", super_block_size=3
            ),
            base + [(4, "super_scales")],
        )
        == "QUANT_SCALE_COUNT"
    )
    # super scales of an int dtype
    assert (
        _validation(
            "uint4",
            (4, 32),
            BlockAffine(1, 16, 1, super_scale_buffer=2, super_scale_dtype="int32"),
            base + [(4, "super_scales")],
        )
        == "QUANT_SCALE_DTYPE"
    )
    # axis2 equal to axis
    assert (
        _validation("uint4", (4, 32), BlockAffine(1, 16, 1, axis2=1, block_size2=2), base)
        == "QUANT_AXIS"
    )
    # a packed data buffer too small
    assert (
        _validation(
            "uint4",
            (4, 32),
            BlockAffine(1, 16, 1, code_packing=Packing(32, 1)),
            [(60, "data"), (16, "scales")],
        )
        == "BUFFER_TOO_SMALL"
    )
    # a non-finite scale offset
    assert (
        _validation("uint4", (4, 32), BlockAffine(1, 16, 1, scale_offset=float("inf")), base)
        == "QUANT_SCALE"
    )


def test_setters_check_their_arguments():
    bufs = [Buffer("data", 64), Buffer("scales", 16)]
    with pytest.raises(hurray.ValidationError) as info:  # 12-bit words
        Descriptor(
            "uint4",
            (4, 32),
            quantization=BlockAffine(1, 16, 1, code_packing=Packing(12, 1)),
            buffers=bufs,
        )
    assert info.value.status_name == "HURRAY_ERR_QUANT_PACKING"
    with pytest.raises(ValueError, match="lanes"):  # 8 lanes, 2 order entries
        Descriptor(
            "uint4",
            (4, 32),
            quantization=BlockAffine(1, 16, 1, code_packing=Packing(32, 1, (0, 1))),
            buffers=bufs,
        )
    with pytest.raises(ValueError, match="super_op"):
        Descriptor(
            "uint4",
            (4, 32),
            quantization=BlockAffine(
                1, 16, 1, super_scale_buffer=2, super_scale_dtype="float32", super_op="add"
            ),
            buffers=bufs,
        )


def test_fields_are_refused_on_kinds_that_do_not_take_them():
    for k, v in itertools.product(["group_index_buffer", "axis2"], [1]):
        with pytest.raises(TypeError):
            PerChannelAffine(0, 1, **{k: v})
        with pytest.raises(TypeError):
            Nf4(64, 1, **{k: v})


def _vector(name):
    import pathlib

    path = pathlib.Path(__file__).parent.parent / "vectors" / f"{name}.bin"
    d = Descriptor.decode(path.read_bytes())
    d = d.replace(buffers=[Buffer(b.role, b.byte_size) for b in d.buffers])  # no alignment
    return d, [bytearray(b.byte_size) for b in d.buffers]


def test_spec_worked_examples():
    """docs/spec/quantization.md §5.6, each example on its golden vector."""
    # GPTQ: N = 8, K = 16, G = 8 (the vector is N = 16, K = 64, G = 16: the
    # same rule; element (3, 10) checked with the numbers of the example)
    d = Descriptor(
        "uint4",
        (8, 16),
        quantization=_vector("quant_gptq")[0].quantization.__class__(
            **{
                **{
                    f: getattr(_vector("quant_gptq")[0].quantization, f)
                    for f in BlockAffine.__match_args__
                },
                "block_size": 8,
            }
        ),
        buffers=[
            Buffer("data", 64),
            Buffer("scales", 32),
            Buffer("zero_points", 8),
            Buffer("group_index", 64),
        ],
    )
    qweight = np.zeros((2, 8), "<u4")
    qweight[1][3] = 0x00000A00
    qzeros = np.zeros((2, 1), "<u4")
    qzeros[1][0] = 0x00007000
    scales = np.zeros((2, 8), "<u2")
    scales[1][3] = 0x211F
    g_idx = np.zeros(16, "<i4")
    g_idx[10] = 1
    out = hurray.Tensor(
        d, [qweight.tobytes(), scales.tobytes(), qzeros.tobytes(), g_idx.tobytes()]
    ).dequantize()
    assert out[3, 10] == np.float32(0.0200042724609375)
    # AWQ: element (n, k) = (1, 5) is lane 4 of qweight[5][0]
    d, bufs = _vector("quant_awq")
    words = np.zeros((32, 2), "<u4")
    words[5][0] = 0x3 << 16
    bufs[0][:] = words.tobytes()
    bufs[1][:] = np.full(64 // 2, 0x3C00, "<u2").tobytes()  # scales 1.0
    out = hurray.Tensor(d, [bytes(b) for b in bufs]).dequantize()
    assert out[1, 5] == 3.0 and out[0, 5] == 0.0 and np.count_nonzero(out) == 1
    # FP8 block: element (150, 260)
    d, bufs = _vector("quant_fp8_block")
    bufs[0][150 * 300 + 260] = 0x4C
    bufs[1][:] = np.full(6, 2.0**-12, np.float32).tobytes()
    out = hurray.Tensor(d, [bytes(b) for b in bufs]).dequantize()
    assert out[150, 260] == np.float32(0.00146484375)
    # bitsandbytes double quant: element 2
    d, bufs = _vector("quant_bnb_double")
    bufs[0][1] = 0x1F
    bufs[1][0] = 7
    bufs[2][:] = np.array([0, -0.6961928009986877] + [0] * 14, np.float32).tobytes()
    nested = np.zeros(256, np.float32)
    nested[7] = 0.0625
    bufs[3][:] = nested.tobytes()
    bufs[4][:] = np.array([0.5], np.float32).tobytes()
    out = hurray.Tensor(d, [bytes(b) for b in bufs]).dequantize()
    assert out.reshape(-1)[2] == np.float32(-0.043512050062417984)
    # NVFP4, divide: code 0b0101 (3.0), scale 0x48 (4.0), global 2.0
    d, bufs = _vector("quant_nvfp4")
    bufs[0][0] = 0b0101
    bufs[1][0] = 0x48
    bufs[2][:] = np.array([2.0], np.float32).tobytes()
    out = hurray.Tensor(d, [bytes(b) for b in bufs]).dequantize()
    assert out[0, 0] == 6.0


def test_element_wise_views_refuse_stored_layouts():
    """codes(), scales() and zero_points() give logical arrays: a tensor whose
    parts are stored packed, permuted or in two levels refuses them."""
    d, bufs = _vector("quant_gptq")
    t = hurray.Tensor(d, [bytes(b) for b in bufs])
    for what in (t.codes, t.scales, t.zero_points):
        with pytest.raises(hurray.UnsupportedError, match="ADR-0024"):
            what()
    # 2-D blocks only: the codes are plain, the scales are not per-axis
    d, bufs = _vector("quant_fp8_block")
    t = hurray.Tensor(d, [bytes(b) for b in bufs])
    assert t.codes().shape == (200, 300)
    with pytest.raises(hurray.UnsupportedError, match="block_size2"):
        t.scales()


def test_gguf_export_does_not_mistake_a_packed_block_affine_for_q8_0(tmp_path):
    """int8 codes, block 32 along the last axis, float16 scales and an inline
    zero point of 0 are GGUF Q8_0, unless a packed or two-level field changes
    the values: then no GGUF type holds the tensor."""
    codes = np.arange(128, dtype=np.int8).reshape(2, 64)
    scales = np.ones(4, np.float16)
    q = BlockAffine(1, 32, 1, "float16", zero_point_offset=1)
    d = Descriptor(
        "int8", (2, 64), quantization=q, buffers=[Buffer("data", 128), Buffer("scales", 8)]
    )
    hurray.save(tmp_path / "a.hurray", {"w": hurray.Tensor(d, [codes.tobytes(), scales.tobytes()])})
    with pytest.raises(hurray.ConversionError, match="no exact GGUF type"):
        hurray.convert(tmp_path / "a.hurray", tmp_path / "a.gguf", quiet=True)
    # the same without the offset is Q8_0
    d0 = d.replace(quantization=BlockAffine(1, 32, 1, "float16"))
    hurray.save(
        tmp_path / "b.hurray", {"w": hurray.Tensor(d0, [codes.tobytes(), scales.tobytes()])}
    )
    hurray.convert(tmp_path / "b.hurray", tmp_path / "b.gguf", quiet=True)


# ------------------------------- session 44: float8 scales on the general path

_FLOAT8_SCALES = ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")


def _scales(dtype_name, values):
    import ml_dtypes

    return np.array(values, getattr(ml_dtypes, dtype_name))


@pytest.mark.parametrize("scale_dtype", _FLOAT8_SCALES)
def test_float8_scales_with_64_bit_codes_and_zero_points(scale_dtype):
    """Float8 scales sent per-channel and block affine tensors to the packed
    decoder, which holds codes and zero points in 32 bits: int64/uint64
    ones came out cut to their low bits (and int8 - INT64_MIN overflowed
    int64 in C), with no error."""
    cases = [
        ("uint64", [2**40 + 5, 2**64 - 1], None, None),
        ("int64", [-(2**40), 2**62 + 1], None, None),
        ("int8", [1, -1], "uint64", [2**64 - 1, 2**40]),
        ("int8", [127, 0], "int64", [-(2**63), 2**63 - 1]),
    ]
    for code_dtype, codes, zp_dtype, zps in cases:
        c = np.array(codes, code_dtype)
        s = _scales(scale_dtype, [1.0] * c.size)
        buffers = [hurray.Buffer("data", c.nbytes), hurray.Buffer("scales", s.nbytes)]
        arrays = [c, s]
        fields = {"zero_point": 0}
        if zp_dtype is not None:
            z = np.array(zps, zp_dtype)
            arrays.append(z)
            buffers.append(hurray.Buffer("zero_points", z.nbytes))
            fields = {"zero_point_buffer": 2, "zero_point_dtype": zp_dtype}
        q = hurray.PerChannelAffine(axis=0, scale_buffer=1, scale_dtype=scale_dtype, **fields)
        d = hurray.Descriptor(code_dtype, (c.size,), quantization=q, buffers=buffers)
        want = np.array(
            [float(int(ci) - int(zi)) for ci, zi in zip(codes, zps or [0] * len(codes))],
            np.float32,
        )
        np.testing.assert_array_equal(hurray.Tensor(d, arrays).dequantize(), want)


@pytest.mark.parametrize("scale_dtype", _FLOAT8_SCALES)
@pytest.mark.parametrize("kind", ["per_channel", "block"])
def test_float8_scales_honour_strides(scale_dtype, kind):
    """The packed decoder built row-major strides from the shape: a strided
    tensor with float8 scales was read as if it were row-major."""
    codes = np.arange(24, dtype=np.int8) - 12
    values = [1.0, 2.0, 4.0, 0.5]
    s = _scales(scale_dtype, values)
    if kind == "per_channel":
        q = hurray.PerChannelAffine(axis=1, scale_buffer=1, scale_dtype=scale_dtype)
        scale_of = np.array(values, np.float32)[None, :]
    else:  # blocks of 6 along axis 0: one per column
        q = hurray.BlockAffine(axis=0, block_size=6, scale_buffer=1, scale_dtype=scale_dtype)
        scale_of = np.array(values, np.float32)[None, :]
    d = hurray.Descriptor(
        "int8",
        (6, 4),
        strides=(1, 6),  # the transpose of a row-major (4, 6)
        quantization=q,
        buffers=[hurray.Buffer("data", 24), hurray.Buffer("scales", s.nbytes)],
    )
    want = codes.reshape(4, 6).T.astype(np.float32) * scale_of
    np.testing.assert_array_equal(hurray.Tensor(d, [codes, s]).dequantize(), want)
