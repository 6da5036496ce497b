#!/usr/bin/env python3
"""A reader of hurray files (file format 1.x) written from the spec alone:
docs/spec/file-format.md and descriptor-encoding.md, never the library's
sources. It is the proof that the spec is complete enough for a stranger to
write a reader (tests/python/test_spec_reader.py runs it against what the
library writes and against damaged files). Keep it that way: when the spec
changes, change this from the spec's text, and do not import hurray here.

Usage: check_files.py FILE...

For each file prints one JSON object. Exit status 0 if every file passes,
1 if any file breaks a rule (the JSON names the rule: spec section or check
number, and the error code the spec assigns), 2 on usage errors.

Depends on Python >= 3.11 and the `xxhash` package (XXH3-64, seed 0).
Section references: "FF" is file-format.md, "DE" descriptor-encoding.md.
What it does not check: descriptor-encoding.md section 9's rules for
packed and two-level quantization, quantization dtypes and axes, statistics
and shard bounds, and buffer contents (sparse index bounds, page tables).
"""

import json
import mmap
import os
import struct
import sys

import xxhash

MAGIC = b"\x89HRY\r\n\x1a\n"
TRAILER_MAGIC = b"HRYEND\x1a\n"
CHUNK_KEY = b"hurray.chunk_checksums"
MAX_INDEX = 1 << 28
MAX_TENSORS = 1 << 20
MAX_META = 1 << 16
MAX_NAME = 4096
MAX_DESC = 1 << 24
MAX_BUFFERS = 1024
NO_BUFFER = 0xFFFFFFFF


class Violation(Exception):
    """A broken rule: `rule` is the spec reference, `code` the error name."""

    def __init__(self, rule, code, msg):
        super().__init__(f"{rule} [{code}] {msg}")
        self.rule, self.code, self.msg = rule, code, msg


def xxh3(b):
    return xxhash.xxh3_64_intdigest(b)


def valid_utf8(b):
    # Python's strict decoder already refuses overlong forms, surrogates and
    # code points above U+10FFFF; FF §1 additionally forbids NUL.
    if b"\x00" in b:
        return False
    try:
        bytes(b).decode("utf-8", "strict")
    except UnicodeDecodeError:
        return False
    return True


# ---------------------------------------------------------------- dtypes (DE §4.1)
DTYPES = {
    1: ("bool", 8),
    2: ("int8", 8),
    3: ("int16", 16),
    4: ("int32", 32),
    5: ("int64", 64),
    6: ("uint8", 8),
    7: ("uint16", 16),
    8: ("uint32", 32),
    9: ("uint64", 64),
    10: ("float16", 16),
    11: ("bfloat16", 16),
    12: ("float32", 32),
    13: ("float64", 64),
    14: ("complex64", 64),
    15: ("complex128", 128),
    16: ("float8_e4m3fn", 8),
    17: ("float8_e5m2", 8),
    18: ("float8_e8m0fnu", 8),
    19: ("float6_e3m2fn", 6),
    20: ("float6_e2m3fn", 6),
    21: ("float4_e2m1fn", 4),
    22: ("int4", 4),
    23: ("uint4", 4),
}
ROLES = {
    1: "data",
    2: "scales",
    3: "zero_points",
    4: "values",
    5: "indices",
    6: "indptr",
    7: "page_pool",
    8: "page_table",
    9: "group_index",
    10: "codebook",
    11: "super_scales",
}
BLOCK_FORMATS = {
    3: (32, 20),
    6: (32, 22),
    7: (32, 24),
    10: (256, 84),
    11: (256, 110),
    12: (256, 144),
    13: (256, 176),
    14: (256, 210),
    15: (256, 292),
    16: (256, 66),
    17: (256, 74),
    18: (256, 98),
    19: (256, 50),
    20: (32, 18),
    21: (256, 110),
    22: (256, 82),
    23: (256, 136),
    29: (256, 56),
    34: (256, 54),
    35: (256, 66),
    39: (32, 17),
    40: (64, 36),
}
MX_ELEMENTS = {1: 16, 2: 17, 3: 19, 4: 20, 5: 21, 6: 2}


def storage_bytes(dtype, count):
    return (count * DTYPES[dtype][1] + 7) // 8


# ------------------------------------------------------ descriptor decoding (DE §2-§6, §10)
LAYOUT_TAGS = {
    0x21: "dense",
    0x23: "coo",
    0x25: "csr",
    0x27: "csc",
    0x29: "bsr",
    0x2B: "paged",
    0x2D: "composite",
}
QUANT_TAGS = {
    0x31: "per_tensor",
    0x33: "per_channel",
    0x35: "block",
    0x37: "nf4",
    0x39: "mx",
    0x3B: "block_coded",
}
ROOT_ONLY = {0x41, 0x43, 0x45, 0x50, 0x52}
MAX_NODES = 8192


class DErr(Exception):
    def __init__(self, code, msg):
        super().__init__(f"[{code}] {msg}")
        self.code, self.msg = code, msg


def _need_dtype(code, what):
    if code == 0 or code not in DTYPES:
        raise DErr("UNSUPPORTED", f"unknown {what} dtype code {code}")


def _zero(b, what):
    if any(b):
        raise DErr("MALFORMED", f"reserved bytes of {what} not zero")


def decode_descriptor(buf):
    """Decode per DE §10; returns a dict tree.  Raises DErr."""
    if len(buf) > MAX_DESC:
        raise DErr("LIMIT", "descriptor over 16 MiB")
    if len(buf) < 6:
        raise DErr("TRUNCATED", "descriptor shorter than 6 bytes")
    if buf[:4] != b"HRYD":
        raise DErr("MALFORMED", "descriptor magic not HRYD")
    ver = struct.unpack_from("<H", buf, 4)[0]
    if ver != 1:
        raise DErr("UNSUPPORTED", f"descriptor encoding version {ver}")
    state = {"nodes": 1}
    return _decode_node(memoryview(buf)[6:], True, 0, state)


def _decode_node(b, root, depth, state):
    node = {
        "strides": None,
        "byte_offset": 0,
        "quant": None,
        "storage": None,
        "scales_ext": None,
        "device": None,
    }
    pos, prev = 0, -1
    while pos < len(b):
        if len(b) - pos < 6:
            raise DErr("TRUNCATED", "record header runs past node")
        tag, ln = struct.unpack_from("<HI", b, pos)
        pos += 6
        if ln > len(b) - pos:
            raise DErr("TRUNCATED", f"record 0x{tag:04x} payload runs past node")
        p = b[pos : pos + ln]
        pos += ln
        if tag <= prev:
            raise DErr("MALFORMED", f"tag 0x{tag:04x} not increasing")
        prev = tag
        known = (
            tag in (0x11, 0x13, 0x15, 0x17, 0x3D, 0x3F)
            or tag in LAYOUT_TAGS
            or tag in QUANT_TAGS
            or tag in ROOT_ONLY
        )
        if not known:
            if tag & 1:
                raise DErr("UNSUPPORTED", f"unknown required tag 0x{tag:04x}")
            continue
        if tag in ROOT_ONLY and not root:
            raise DErr("MALFORMED", f"root-only tag 0x{tag:04x} in member node")
        if tag in LAYOUT_TAGS and "layout" in node:
            raise DErr("MALFORMED", "second layout record")
        if tag in QUANT_TAGS and node["quant"] is not None:
            raise DErr("MALFORMED", "second quantization record")
        _decode_record(node, tag, p, depth, state)
    for k, n in (("dtype", "DTYPE"), ("shape", "SHAPE"), ("layout", "layout")):
        if k not in node:
            raise DErr("MALFORMED", f"node without {n}")
    if root and "buffers" not in node:
        raise DErr("MALFORMED", "root without BUFFER_TABLE")
    return node


def _decode_record(node, tag, p, depth, state):
    n = len(p)

    def size(expected):
        if n != expected:
            raise DErr("MALFORMED", f"record 0x{tag:04x} payload {n} != {expected}")

    if tag == 0x11:
        size(2)
        d = struct.unpack_from("<H", p)[0]
        _need_dtype(d, "element")
        node["dtype"] = d
    elif tag == 0x13:
        if n % 8:
            raise DErr("MALFORMED", "SHAPE not a multiple of 8")
        if n // 8 > 32:
            raise DErr("LIMIT", "rank over 32")
        node["shape"] = list(struct.unpack_from(f"<{n // 8}Q", p))
    elif tag == 0x15:
        if n % 8:
            raise DErr("MALFORMED", "STRIDES not a multiple of 8")
        if n // 8 > 32:
            raise DErr("LIMIT", "strides over 32")
        if n // 8 != len(node["shape"]):
            raise DErr("MALFORMED", "STRIDES count != rank")
        node["strides"] = list(struct.unpack_from(f"<{n // 8}q", p))
    elif tag == 0x17:
        size(8)
        node["byte_offset"] = struct.unpack_from("<Q", p)[0]
    elif tag == 0x21:
        size(4)
        node["layout"] = {"kind": "dense", "data": struct.unpack_from("<I", p)[0]}
    elif tag == 0x23:
        rank = len(node["shape"])
        size(16 + 4 * rank)
        idt, flags, res, vals, nnz = struct.unpack_from("<HBBIQ", p)
        _need_dtype(idt, "index")
        if flags & 0xFE:
            raise DErr("MALFORMED", "unknown COO flag bits")
        if res:
            raise DErr("MALFORMED", "COO reserved byte")
        idx = list(struct.unpack_from(f"<{rank}I", p, 16))
        node["layout"] = {
            "kind": "coo",
            "index_dtype": idt,
            "canonical": flags & 1,
            "values": vals,
            "nnz": nnz,
            "indices": idx,
        }
    elif tag in (0x25, 0x27, 0x29):
        size(40 if tag == 0x29 else 24)
        idt, res, vals, nnz, indptr, indices = struct.unpack_from("<HHIQII", p)
        _need_dtype(idt, "index")
        if res:
            raise DErr("MALFORMED", "sparse reserved field")
        lay = {
            "kind": LAYOUT_TAGS[tag],
            "index_dtype": idt,
            "values": vals,
            "nnz": nnz,
            "indptr": indptr,
            "indices": indices,
        }
        if tag == 0x29:
            lay["block_rows"], lay["block_cols"] = struct.unpack_from("<QQ", p, 24)
        node["layout"] = lay
    elif tag == 0x2B:
        size(32)
        tdt, res, axis, ps, npages, pool, table = struct.unpack_from("<HHIQQII", p)
        _need_dtype(tdt, "page table")
        if res:
            raise DErr("MALFORMED", "paged reserved field")
        node["layout"] = {
            "kind": "paged",
            "table_dtype": tdt,
            "axis": axis,
            "page_size": ps,
            "num_pages": npages,
            "pool": pool,
            "table": table,
        }
    elif tag == 0x2D:
        if n < 4:
            raise DErr("TRUNCATED", "composite member count")
        cnt = struct.unpack_from("<I", p)[0]
        if cnt > 1024:
            raise DErr("LIMIT", "over 1024 composite members")
        if depth + 1 > 8 and cnt:
            raise DErr("LIMIT", "members nested deeper than 8")
        state["nodes"] += cnt
        if state["nodes"] > MAX_NODES:
            raise DErr("LIMIT", "over 8192 nodes")
        pos, members = 4, []
        for _ in range(cnt):
            if n - pos < 2:
                raise DErr("TRUNCATED", "member name length")
            nl = struct.unpack_from("<H", p, pos)[0]
            pos += 2
            if nl > 255:
                raise DErr("LIMIT", "member name over 255 bytes")
            if n - pos < nl:
                raise DErr("TRUNCATED", "member name")
            name = bytes(p[pos : pos + nl])
            pos += nl
            if b"\x00" in name:
                raise DErr("MALFORMED", "NUL in member name")
            if n - pos < 4:
                raise DErr("TRUNCATED", "member node length")
            L = struct.unpack_from("<I", p, pos)[0]
            pos += 4
            if n - pos < L:
                raise DErr("TRUNCATED", "member node")
            members.append((name, _decode_node(p[pos : pos + L], False, depth + 1, state)))
            pos += L
        if pos != n:
            raise DErr("MALFORMED", "bytes after last composite member")
        node["layout"] = {"kind": "composite", "members": members}
    elif tag in (0x31,):
        size(16)
        scale, zp = struct.unpack_from("<dq", p)
        node["quant"] = {"kind": "per_tensor", "scale": scale, "zero_point": zp}
    elif tag in (0x33, 0x35):
        size(32 if tag == 0x35 else 24)
        axis, sbuf, sdt, zdt, zbuf, izp = struct.unpack_from("<IIHHIq", p)
        _need_dtype(sdt, "scale")
        if zdt:
            _need_dtype(zdt, "zero-point")
        if (zdt == 0) != (zbuf == NO_BUFFER):
            raise DErr("MALFORMED", "zero-point buffer/dtype not both present or absent")
        if zbuf != NO_BUFFER and izp:
            raise DErr("MALFORMED", "inline zero point beside zero-point buffer")
        q = {
            "kind": QUANT_TAGS[tag],
            "axis": axis,
            "scales": sbuf,
            "scale_dtype": sdt,
            "zp_dtype": zdt,
            "zero_points": zbuf,
            "zero_point": izp,
        }
        if tag == 0x35:
            q["block_size"] = struct.unpack_from("<Q", p, 24)[0]
        node["quant"] = q
    elif tag == 0x37:
        size(16)
        bs, abuf, adt, res = struct.unpack_from("<QIHH", p)
        _need_dtype(adt, "absmax")
        if res:
            raise DErr("MALFORMED", "NF4 reserved field")
        node["quant"] = {"kind": "nf4", "block_size": bs, "scales": abuf, "scale_dtype": adt}
    elif tag == 0x39:
        size(16)
        el, r1, r2, axis, bs, sbuf = struct.unpack_from("<BBHIII", p)
        if r1 or r2:
            raise DErr("MALFORMED", "MX reserved field")
        if el not in MX_ELEMENTS:
            raise DErr("UNSUPPORTED", f"unknown MX element {el}")
        node["quant"] = {
            "kind": "mx",
            "element": el,
            "axis": axis,
            "block_size": bs,
            "scales": sbuf,
            "scale_dtype": 18,
        }
    elif tag == 0x3B:
        size(8)
        fmt, res, axis = struct.unpack_from("<HHI", p)
        if fmt not in BLOCK_FORMATS:
            raise DErr("UNSUPPORTED", f"unknown block format {fmt}")
        if res:
            raise DErr("MALFORMED", "block-coded reserved field")
        node["quant"] = {"kind": "block_coded", "format": fmt, "axis": axis}
    elif tag == 0x3D:
        if node["quant"] is None or node["quant"]["kind"] not in ("per_channel", "block", "nf4"):
            raise DErr("MALFORMED", "QUANT_STORAGE without per-channel/block/NF4")
        rank = len(node["shape"])
        flags = p[0] if n else 0
        if not (n == 80 and not (flags & 1)) and not (n == 80 + rank and flags & 1):
            raise DErr("MALFORMED", "QUANT_STORAGE size")
        if flags & 0xFE:
            raise DErr("MALFORMED", "QUANT_STORAGE flags")
        _zero(p[5:8], "QUANT_STORAGE")
        # Packing fields: recorded, not interpreted (we only extract dense bytes
        # of unquantized tensors).
        node["storage"] = {
            "flags": flags,
            "code_word_bits": p[1],
            "code_axis": p[2],
            "zp_word_bits": p[3],
            "zp_axis": p[4],
            "zero_point_offset": struct.unpack_from("<q", p, 8)[0],
            "storage_axes": list(p[80:]) if flags & 1 else None,
        }
    elif tag == 0x3F:
        if node["quant"] is None or node["quant"]["kind"] not in ("per_channel", "block", "nf4"):
            raise DErr("MALFORMED", "QUANT_SCALES without per-channel/block/NF4")
        size(56)
        (axis2, gbuf, bs2, gdt, ssdt, op) = struct.unpack_from("<IIQHHB", p)
        _zero(p[21:24], "QUANT_SCALES")
        _zero(p[36:40], "QUANT_SCALES")
        cb, scb, ssbuf = struct.unpack_from("<III", p, 24)
        sbs, soff = struct.unpack_from("<Qd", p, 40)
        if op > 2:
            raise DErr("UNSUPPORTED", "unknown super op")
        for d in (gdt, ssdt):
            if d:
                _need_dtype(d, "QUANT_SCALES")
        node["scales_ext"] = {
            "group_index": gbuf,
            "codebook": cb,
            "scale_codebook": scb,
            "super_scales": ssbuf,
        }
    elif tag == 0x41:
        if n < 4:
            raise DErr("MALFORMED", "BUFFER_TABLE < 4 bytes")
        cnt = struct.unpack_from("<I", p)[0]
        if cnt > MAX_BUFFERS:
            raise DErr("LIMIT", "over 1024 buffer table entries")
        size(4 + 16 * cnt)
        ents = []
        for i in range(cnt):
            role, sync, res, align, bsz = struct.unpack_from("<BBHIQ", p, 4 + 16 * i)
            if role not in ROLES:
                raise DErr("UNSUPPORTED", f"unknown buffer role {role}")
            if sync > 2:
                raise DErr("UNSUPPORTED", f"unknown sync mode {sync}")
            if res:
                raise DErr("MALFORMED", "buffer table reserved field")
            ents.append({"role": role, "sync": sync, "alignment": align, "byte_size": bsz})
        node["buffers"] = ents
    elif tag == 0x43:
        size(12)
        dt, did, mc, r1, r2 = struct.unpack_from("<iiBBH", p)
        if mc not in (1, 2, 3, 4):
            raise DErr("UNSUPPORTED", f"unknown memory class {mc}")
        if r1 or r2:
            raise DErr("MALFORMED", "DEVICE reserved field")
        node["device"] = (dt, did, mc)
    elif tag == 0x45:
        if n < 4:
            raise DErr("MALFORMED", "SHARD < 4 bytes")
        r = struct.unpack_from("<I", p)[0]
        if r > 32:
            raise DErr("LIMIT", "shard rank over 32")
        size(4 + 16 * r)
        node["shard"] = {
            "global_shape": list(struct.unpack_from(f"<{r}Q", p, 4)),
            "offsets": list(struct.unpack_from(f"<{r}Q", p, 4 + 8 * r)),
        }
    elif tag == 0x50:
        if n < 8:
            raise DErr("MALFORMED", "STATISTICS < 8 bytes")
        flags = p[0]
        if flags & 0xF0:
            raise DErr("MALFORMED", "statistics flag bits 4-7")
        _zero(p[1:8], "STATISTICS")
        size(8 + 8 * bin(flags).count("1"))
        node["statistics"] = flags
    elif tag == 0x52:
        if n < 2:
            raise DErr("MALFORMED", "EXTENSION cut short")
        nl = struct.unpack_from("<H", p)[0]
        if nl > 255:
            raise DErr("LIMIT", "extension name over 255")
        if n < 2 + nl + 4:
            raise DErr("MALFORMED", "EXTENSION cut short")
        name = bytes(p[2 : 2 + nl])
        if b"\x00" in name:
            raise DErr("MALFORMED", "NUL in extension name")
        m = struct.unpack_from("<I", p, 2 + nl)[0]
        if m > (1 << 20):
            raise DErr("LIMIT", "extension metadata over 1 MiB")
        if n != 6 + nl + m:
            raise DErr("MALFORMED", "EXTENSION does not fill payload")
        node["extension"] = name.decode("utf-8", "replace")


# ------------------------------------------------- partial validation (DE §9, subset)
def numel(shape):
    r = 1
    for d in shape:
        r *= d
    return r


def validate(root):
    """A subset of DE §9: buffer table (§9.1), dtype, buffer references with
    role and size need for dense / sparse / paged data buffers and for
    per-channel/block/NF4/MX scale buffers, §9.4.  Returns None or (code, msg)."""
    bt = root["buffers"]
    for e in bt:
        a = e["alignment"]
        if a == 0 or a & (a - 1) or a > 4096:
            return "BUFFER_TABLE", f"alignment {a} not a power of two <= 4096"
    if root["device"] is not None:
        dt, did, mc = root["device"]
        if dt <= 0 or did < 0:
            return "DEVICE", "device type/id"
    needs = [None] * len(bt)

    def use(i, role, need, exact_code=None):
        if i >= len(bt):
            raise DErr("BUFFER_INDEX", f"buffer index {i} >= {len(bt)}")
        if bt[i]["role"] != role:
            raise DErr(
                "BUFFER_ROLE", f"buffer {i} has role {ROLES[bt[i]['role']]}, needs {ROLES[role]}"
            )
        if exact_code and bt[i]["byte_size"] != need:
            raise DErr(exact_code, f"buffer {i} byte_size {bt[i]['byte_size']} != {need}")
        needs[i] = max(needs[i] or 0, need)

    def walk(node):
        shape, dt, lay, q = node["shape"], node["dtype"], node["layout"], node["quant"]
        n = numel(shape)
        if n >= 1 << 64:
            raise DErr("OVERFLOW", "numel overflows")
        k = lay["kind"]
        bo = node["byte_offset"]
        if k == "dense":
            if q and q["kind"] == "block_coded":
                el, by = BLOCK_FORMATS[q["format"]]
                need = (n // el) * by + bo
            elif node["strides"] is None:
                need = storage_bytes(dt, n) + bo
            elif n == 0:
                need = bo
            else:
                it = DTYPES[dt][1] // 8
                fwd = sum(s * (d - 1) for s, d in zip(node["strides"], shape) if s > 0)
                back = sum(-s * (d - 1) for s, d in zip(node["strides"], shape) if s < 0)
                if back * it > bo:
                    raise DErr("STRIDES", "negative strides run before byte 0")
                need = bo + (fwd + 1) * it
            if node["storage"] and node["storage"]["code_word_bits"]:
                need = 0  # packed codes: size rule not implemented here
            use(lay["data"], 1, need)
        elif k in ("coo", "csr", "csc", "bsr"):
            isz = 4 if lay["index_dtype"] == 4 else 8
            if lay["index_dtype"] not in (4, 5):
                raise DErr("SPARSE_INDEX_DTYPE", "index dtype")
            nnz = lay["nnz"]
            blk = lay["block_rows"] * lay["block_cols"] if k == "bsr" else 1
            use(lay["values"], 4, storage_bytes(dt, nnz * blk) + bo)
            if k == "coo":
                for i in lay["indices"]:
                    use(i, 5, nnz * isz)
            else:
                if len(shape) != 2:
                    raise DErr("SPARSE_RANK", "CSR/CSC/BSR need rank 2")
                if k == "bsr":
                    br, bc = lay["block_rows"], lay["block_cols"]
                    if br < 1 or bc < 1 or shape[0] % br or shape[1] % bc:
                        raise DErr("SPARSE_BLOCK", "block shape")
                    P = shape[0] // br
                else:
                    P = shape[0] if k == "csr" else shape[1]
                use(lay["indptr"], 6, (P + 1) * isz)
                use(lay["indices"], 5, nnz * isz)
        elif k == "paged":
            ax = lay["axis"]
            outer = numel(shape[:ax])
            inner = numel(shape[ax + 1 :])
            ps = lay["page_size"]
            page_bytes = ps * inner * DTYPES[dt][1] // 8
            blocks = -(-shape[ax] // ps) if ps else 0
            isz = 4 if lay["table_dtype"] == 4 else 8
            use(lay["pool"], 7, page_bytes * lay["num_pages"] + bo)
            use(lay["table"], 8, outer * blocks * isz)
        elif k == "composite":
            for _, m in lay["members"]:
                walk(m)
        if q and q["kind"] in ("per_channel", "block", "mx", "nf4"):
            if q["kind"] == "nf4":
                cnt = -(-n // q["block_size"]) if q["block_size"] else 0
            elif q["kind"] == "per_channel":
                cnt = shape[q["axis"]] if q["axis"] < len(shape) else 0
            else:
                bs = q["block_size"]
                s = list(shape)
                if q["axis"] < len(s) and bs:
                    s[q["axis"]] = -(-s[q["axis"]] // bs)
                cnt = numel(s)
            if not (node["storage"] or node["scales_ext"]):
                use(q["scales"], 2, storage_bytes(q["scale_dtype"], cnt), "QUANT_SCALE_COUNT")
                if q.get("zero_points", NO_BUFFER) != NO_BUFFER:
                    use(
                        q["zero_points"],
                        3,
                        storage_bytes(q["zp_dtype"], cnt),
                        "QUANT_ZERO_POINT_COUNT",
                    )
            else:
                # two-level / packed fields: mark the buffers as referenced only
                for i in (q["scales"], q.get("zero_points", NO_BUFFER)):
                    if i != NO_BUFFER and i < len(needs):
                        needs[i] = needs[i] or 0
        ext = node["scales_ext"]
        if ext:
            for i in ext.values():
                if i != NO_BUFFER and i < len(needs):
                    needs[i] = needs[i] or 0

    try:
        walk(root)
    except DErr as e:
        return e.code, e.msg
    for i, e in enumerate(bt):
        if needs[i] is None:
            return "BUFFER_UNREFERENCED", f"buffer {i} is referenced by nothing"
        if e["byte_size"] < needs[i]:
            return "BUFFER_TOO_SMALL", f"buffer {i}: {e['byte_size']} < {needs[i]}"
    return None


# ------------------------------------------------------------- the file reader
class Reader:
    def __init__(self, path):
        self.path = path
        self.size = os.path.getsize(path)
        self._f = open(path, "rb")
        self.m = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ) if self.size else b""

    def close(self):
        if isinstance(self.m, mmap.mmap):
            self.m.close()
        self._f.close()

    # FF §10.1 checks 1-12
    def read_structure(self):
        m, size = self.m, self.size
        if size >= 8 and m[:8] != MAGIC:
            raise Violation("FF §10.1 check 1 (§3)", "BAD_MAGIC", "bad magic")
        if size < 128:
            raise Violation("FF §10.1 check 2 (§2)", "TRUNCATED", f"file is {size} bytes < 128")
        self.major, self.minor = struct.unpack_from("<HH", m, 8)
        if self.major != 1:
            raise Violation("FF §10.1 check 3 (§11)", "UNSUPPORTED", f"major {self.major}")
        if any(m[12:64]):
            raise Violation("FF §10.1 check 4 (§3)", "MALFORMED", "reserved header byte not zero")
        t = m[size - 64 : size]
        if t[56:64] != TRAILER_MAGIC:
            raise Violation("FF §10.1 check 5 (§6)", "TRUNCATED", "no trailer magic")
        (
            self.index_offset,
            self.index_length,
            self.index_checksum,
            self.tensor_count,
            self.metadata_count,
            tmaj,
            tmin,
            flags,
            tsum,
        ) = struct.unpack_from("<QQQQQHHIQ", t)
        if xxh3(t[:48]) != tsum:
            raise Violation("FF §10.1 check 6 (§7)", "CHECKSUM", "trailer checksum mismatch")
        if tmaj != self.major or tmin != self.minor or flags:
            raise Violation(
                "FF §10.1 check 7 (§6)",
                "MALFORMED",
                f"trailer version {tmaj}.{tmin} vs header {self.major}.{self.minor}, flags {flags}",
            )
        if self.index_length > MAX_INDEX:
            raise Violation("FF §10.1 check 8 (§9)", "LIMIT", "index over 256 MiB")
        io, il = self.index_offset, self.index_length
        if io < 64 or io % 8 or io + il >= 1 << 64 or io + il != size - 64:
            raise Violation(
                "FF §10.1 check 9 (§5)",
                "RANGE",
                f"index_offset {io} / index_length {il} vs file size {size}",
            )
        if self.tensor_count > MAX_TENSORS or self.metadata_count > MAX_META:
            raise Violation("FF §10.1 check 10 (§9)", "LIMIT", "counts")
        if 11 * self.tensor_count + 8 * self.metadata_count > il:
            raise Violation("FF §10.1 check 11 (§10.2)", "MALFORMED", "counts cannot fit in index")
        self.index = bytes(m[io : io + il])
        if xxh3(self.index) != self.index_checksum:
            raise Violation("FF §10.1 check 12 (§7)", "CHECKSUM", "index checksum mismatch")

    # FF §10.1 checks 13-34
    def parse_index(self):
        ix, pos = self.index, 0
        end = len(ix)

        def need(n, check, what, code="MALFORMED"):
            if end - pos < n:
                raise Violation(f"FF §10.1 check {check} (§5)", code, f"index ends inside {what}")

        def name_field(check0, what):
            nonlocal pos
            need(2, check0, f"{what} length")
            nl = struct.unpack_from("<H", ix, pos)[0]
            pos += 2
            if nl == 0:
                raise Violation(f"FF §10.1 check {check0 + 1} (§5)", "MALFORMED", f"empty {what}")
            if nl > MAX_NAME:
                raise Violation(
                    f"FF §10.1 check {check0 + 2} (§9)", "LIMIT", f"{what} over 4096 bytes"
                )
            need(nl, check0 + 3, what)
            nm = ix[pos : pos + nl]
            pos += nl
            if not valid_utf8(nm):
                raise Violation(
                    f"FF §10.1 check {check0 + 4} (§1)",
                    "MALFORMED",
                    f"{what} not valid UTF-8: {nm!r}",
                )
            return nm

        self.tensors = []
        prev = None
        for _ in range(self.tensor_count):
            nm = name_field(13, "tensor name")
            if prev is not None and nm == prev:
                raise Violation("FF §10.1 check 18 (§5.1)", "DUPLICATE_NAME", f"duplicate {nm!r}")
            if prev is not None and nm < prev:
                raise Violation(
                    "FF §10.1 check 19 (§5.1)", "MALFORMED", f"{nm!r} sorts before {prev!r}"
                )
            prev = nm
            need(4, 20, "descriptor_len")
            dl = struct.unpack_from("<I", ix, pos)[0]
            pos += 4
            if dl > MAX_DESC:
                raise Violation("FF §10.1 check 21 (§9)", "LIMIT", "descriptor over 16 MiB")
            need(dl + 4, "21a", "descriptor")
            desc = ix[pos : pos + dl]
            pos += dl
            bc = struct.unpack_from("<I", ix, pos)[0]
            pos += 4
            if bc > MAX_BUFFERS:
                raise Violation("FF §10.1 check 22 (§9)", "LIMIT", "buffer_count over 1024")
            need(24 * bc, 23, "buffer records")
            recs = []
            for _ in range(bc):
                off, ln, ck = struct.unpack_from("<QQQ", ix, pos)
                pos += 24
                if off % 64:
                    raise Violation(
                        "FF §10.1 check 24 (§4)",
                        "BUFFER_ALIGNMENT",
                        f"{nm!r}: buffer offset {off} not a multiple of 64",
                    )
                if off < 64 or off + ln >= 1 << 64 or off + ln > self.index_offset:
                    raise Violation(
                        "FF §10.1 check 25 (§4)",
                        "RANGE",
                        f"{nm!r}: buffer [{off}, +{ln}) outside data region",
                    )
                recs.append((off, ln, ck))
            self.tensors.append((nm, desc, recs))
        # check 26: no overlap
        ranges = sorted((o, o + l, t[0]) for t in self.tensors for (o, l, _) in t[2] if l > 0)
        for a, b in zip(ranges, ranges[1:]):
            if b[0] < a[1]:
                raise Violation(
                    "FF §10.1 check 26 (§4)",
                    "OVERLAP",
                    f"buffers of {a[2]!r} and {b[2]!r} share bytes",
                )
        # metadata, checks 27-32
        self.metadata = []
        prev = None
        for _ in range(self.metadata_count):
            key = name_field(13, "metadata key")  # check 27 = 13-17 for keys
            if prev is not None and key == prev:
                raise Violation(
                    "FF §10.1 check 28 (§5.2)", "DUPLICATE_NAME", f"duplicate key {key!r}"
                )
            if prev is not None and key < prev:
                raise Violation(
                    "FF §10.1 check 29 (§5.2)", "MALFORMED", f"key {key!r} out of order"
                )
            prev = key
            need(5, 30, "metadata type/value_len")
            typ, vl = struct.unpack_from("<BI", ix, pos)
            pos += 5
            need(vl, 31, "metadata value")
            val = ix[pos : pos + vl]
            pos += vl
            bad = (
                (typ in (2, 3) and vl != 8)
                or (typ == 4 and (vl != 1 or val[0] > 1))
                or (typ == 1 and not valid_utf8(val))
            )
            if bad:
                raise Violation(
                    "FF §10.1 check 32 (§5.2)", "MALFORMED", f"bad value for {key!r} type {typ}"
                )
            self.metadata.append((key, typ, val))
        if pos != end:
            raise Violation(
                "FF §10.1 check 33 (§5)", "MALFORMED", f"{end - pos} bytes after last entry"
            )
        # check 34: chunk checksum table
        self.chunk_size, self.chunk_sums = None, None
        for key, typ, val in self.metadata:
            if typ != 6:
                continue
            if key != CHUNK_KEY:
                raise Violation(
                    "FF §10.1 check 34 (§7.1)", "MALFORMED", f"type 6 under key {key!r}"
                )
            if len(val) < 8 or (len(val) - 8) % 8:
                raise Violation("FF §10.1 check 34 (§7.1)", "MALFORMED", "chunk table value_len")
            cs = struct.unpack_from("<Q", val)[0]
            if cs & (cs - 1) or not (1 << 16) <= cs <= (1 << 40):
                raise Violation("FF §10.1 check 34 (§7.1)", "MALFORMED", f"chunk_size {cs}")
            want = sum(-(-l // cs) for t in self.tensors for (_, l, _) in t[2] if l > cs)
            if (len(val) - 8) // 8 != want:
                raise Violation(
                    "FF §10.1 check 34 (§7.1)",
                    "MALFORMED",
                    f"{(len(val) - 8) // 8} chunk sums, expected {want}",
                )
            self.chunk_size = cs
            self.chunk_sums = struct.unpack_from(f"<{want}Q", val, 8)

    # FF §7 / §7.1: every buffer checksum, first (as FF §10.1's last paragraph orders it)
    def verify_checksums(self):
        chunk_i = 0
        for nm, desc, recs in self.tensors:
            name = nm.decode()
            # checksums (§7, §7.1): we check both the whole sum and chunk sums
            for i, (off, ln, ck) in enumerate(recs):
                whole = xxhash.xxh3_64()  # streamed in 4 MiB pieces: no whole-buffer copy
                for k in range(off, off + ln, 1 << 22):
                    whole.update(self.m[k : min(k + (1 << 22), off + ln)])
                if whole.intdigest() != ck:
                    raise Violation(
                        "FF §7 / §10.1 (verify)",
                        "CHECKSUM",
                        f"{name!r}: buffer {i} checksum mismatch",
                    )
                if self.chunk_size and ln > self.chunk_size:
                    cs = self.chunk_size
                    for k in range(0, ln, cs):
                        h = xxhash.xxh3_64()
                        for j in range(off + k, off + min(k + cs, ln), 1 << 22):
                            h.update(self.m[j : min(j + (1 << 22), off + min(k + cs, ln))])
                        if h.intdigest() != self.chunk_sums[chunk_i]:
                            raise Violation(
                                "FF §7.1",
                                "CHECKSUM",
                                f"{name!r}: buffer {i} chunk {k // cs} checksum mismatch",
                            )
                        chunk_i += 1

    # FF §10.3 steps 2-5 (subset)
    def check_tensors(self, want_data=True):
        out = {}
        self.verify_checksums()
        # FF §10.1 (verify): after the checksums, §10.3 steps 2-5 for every tensor
        for nm, desc, recs in self.tensors:
            name = nm.decode()
            try:
                d = decode_descriptor(desc)
            except DErr as e:
                raise Violation("FF §10.3 step 2 / DE §10", e.code, f"{name!r}: {e.msg}")
            v = validate(d)
            if v:
                raise Violation("FF §10.3 step 2 / DE §9", v[0], f"{name!r}: {v[1]}")
            bt = d["buffers"]
            if len(bt) != len(recs):
                raise Violation(
                    "FF §10.3 step 3 (§5.1)",
                    "MALFORMED",
                    f"{name!r}: buffer_count {len(recs)} != table {len(bt)}",
                )
            for i, ((off, ln, _), e) in enumerate(zip(recs, bt)):
                if ln != e["byte_size"]:
                    raise Violation(
                        "FF §10.3 step 3 (§5.1)",
                        "MALFORMED",
                        f"{name!r}: buffer {i} length {ln} != byte_size {e['byte_size']}",
                    )
                if off % max(64, e["alignment"]):
                    raise Violation(
                        "FF §10.3 step 4 (§4)",
                        "BUFFER_ALIGNMENT",
                        f"{name!r}: buffer {i} offset {off} vs alignment {e['alignment']}",
                    )
            dev = d["device"]
            if dev is not None and dev != (1, 0, 1):
                raise Violation(
                    "FF §10.3 step 5 (§8)", "DEVICE_MISMATCH", f"{name!r}: stored device {dev}"
                )
            for i, e in enumerate(bt):
                if e["sync"] != 0:
                    raise Violation(
                        "FF §10.3 step 5 (§8)",
                        "SYNC_MODE_MISMATCH",
                        f"{name!r}: buffer {i} sync mode {e['sync']}",
                    )
            info = {
                "dtype": DTYPES[d["dtype"]][0],
                "shape": d["shape"],
                "layout": d["layout"]["kind"],
                "quant": d["quant"]["kind"] if d["quant"] else None,
                "buffers": [
                    {
                        "role": ROLES[e["role"]],
                        "alignment": e["alignment"],
                        "offset": r[0],
                        "length": r[1],
                    }
                    for e, r in zip(bt, recs)
                ],
            }
            if "shard" in d:
                info["shard"] = d["shard"]
            plain = (
                d["layout"]["kind"] == "dense"
                and d["quant"] is None
                and d["strides"] is None
                and DTYPES[d["dtype"]][1] % 8 == 0
            )
            if plain:
                off = recs[d["layout"]["data"]][0] + d["byte_offset"]
                nb = storage_bytes(d["dtype"], numel(d["shape"]))
                info["data_xxh3"] = (
                    "%016x" % xxh3(self.m[off : off + nb]) if nb <= 1 << 26 else None
                )
                if want_data:
                    info["_bytes"] = (off, nb)
            out[name] = info
        return out


def meta_value(typ, val):
    if typ == 1:
        return val.decode()
    if typ == 2:
        return struct.unpack("<q", val)[0]
    if typ == 3:
        return repr(struct.unpack("<d", val)[0])
    if typ == 4:
        return bool(val[0])
    return {"type": typ, "hex": val[:32].hex(), "len": len(val)}


def check_file(path, want_data=False):
    """Returns (summary dict, Reader or None).  summary['ok'] tells the verdict."""
    r = Reader(path)
    s = {"file": path, "size": r.size}
    try:
        r.read_structure()
        s["version"] = f"{r.major}.{r.minor}"
        r.parse_index()
        s["metadata"] = {
            k.decode(): meta_value(t, v)
            for k, t, v in r.metadata
            if not (t == 6 and k == CHUNK_KEY)
        }
        s["chunk_size"] = r.chunk_size
        s["chunk_sums"] = len(r.chunk_sums) if r.chunk_sums else 0
        s["tensors"] = r.check_tensors(want_data)
        s["ok"] = True
    except Violation as v:
        s.update(ok=False, rule=v.rule, code=v.code, error=v.msg)
    return s, r


def main(argv):
    files = [a for a in argv if not a.startswith("--")]
    if not files:
        print(__doc__, file=sys.stderr)
        return 2
    bad = 0
    for p in files:
        s, r = check_file(p)
        for t in s.get("tensors", {}).values():
            t.pop("_bytes", None)
        r.close()
        print(json.dumps(s, ensure_ascii=False))
        bad |= not s["ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
