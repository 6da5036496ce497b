"""Writes the fresh-venv check's inputs with the formats' own packages
(safetensors with torch, gguf), in the main test venv where they are
installed, and checks that formats.py's hand writers give the same bytes.

usage: peer_inputs.py FOLDER   -> FOLDER/peer.safetensors, FOLDER/peer.gguf
Prints "peers: N passed, N failed[, N skipped]"; exit status 1 on a failure.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import formats  # noqa: E402

ST_DTYPES = {
    "BF16": "bfloat16",
    "F16": "float16",
    "F32": "float32",
    "I8": "int8",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


def peer_safetensors(path):
    import torch
    from safetensors.torch import save_file

    tensors, metadata = formats.safetensors_contents()
    sd = {
        name: torch.frombuffer(bytearray(data), dtype=torch.uint8)
        .view(getattr(torch, ST_DTYPES[dtype]))
        .reshape(shape)
        for name, (dtype, shape, data) in tensors.items()
    }
    save_file(sd, path, metadata=metadata)


def peer_gguf(path):
    import gguf
    import numpy as np

    kvs, tensors = formats.gguf_contents()
    w = gguf.GGUFWriter(path, arch=kvs[0][2])
    for key, vtype, value, *sub in kvs[1:]:
        w.add_key_value(
            key,
            value,
            gguf.GGUFValueType(vtype),
            sub_type=gguf.GGUFValueType(sub[0]) if sub else None,
        )
    for name, ggml_type, dims, data in tensors:
        qtype = gguf.GGMLQuantizationType(ggml_type)
        if qtype in (gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0):
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            rows = int(np.prod(dims[1:])) if len(dims) > 1 else 1
            arr = np.frombuffer(data, np.uint8).reshape(rows, dims[0] // block * size)
            w.add_tensor(name, arr, raw_dtype=qtype)
        else:
            dt = np.float16 if qtype == gguf.GGMLQuantizationType.F16 else np.float32
            w.add_tensor(name, np.frombuffer(data, dt).reshape(list(reversed(dims))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv):
    folder = argv[1]
    os.makedirs(folder, exist_ok=True)
    passed = failed = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        hand_st, hand_gg = formats.write_check_files(tmp)
        for name, writer, hand in (
            ("peer.safetensors", peer_safetensors, hand_st),
            ("peer.gguf", peer_gguf, hand_gg),
        ):
            path = os.path.join(folder, name)
            try:
                writer(path)
            except ImportError as exc:
                print(f"peers: SKIP {name}: {exc}")
                skipped += 1
                continue
            with open(path, "rb") as a, open(hand, "rb") as b:
                same = a.read() == b.read()
            if same:
                print(f"peers: ok   {name} equals the hand-written file byte for byte")
                passed += 1
            else:
                print(f"peers: FAIL {name} differs from the hand-written file (formats.py)")
                failed += 1
    print(f"peers: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
