"""hurray from Python: one file holding a dense tensor, a per-channel
quantized weight, a CSR matrix and typed metadata; reopened lazily, read
without copying, and handed over in-process through the __hurray__ capsule.

    python examples/demo.py OUT.hurray
"""

import sys

import numpy as np
import scipy.sparse as sp

import hurray

path = sys.argv[1] if len(sys.argv) > 1 else "demo-python.hurray"

# A per-channel quantized weight: int8 codes, float32 scales, int8 zero points.
codes = np.arange(-24, 24, dtype=np.int8).reshape(4, 12)
scales = np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float32)
zero_points = np.array([0, 1, -1, 2], dtype=np.int8)
weight = hurray.Tensor(
    hurray.Descriptor(
        "int8",
        codes.shape,
        quantization=hurray.PerChannelAffine(
            axis=0,
            scale_buffer=1,
            scale_dtype="float32",
            zero_point_buffer=2,
            zero_point_dtype="int8",
        ),
        buffers=[
            hurray.Buffer("data", codes.nbytes),
            hurray.Buffer("scales", scales.nbytes),
            hurray.Buffer("zero_points", zero_points.nbytes),
        ],
    ),
    [codes, scales, zero_points],
)  # three owners, no copies

embedding = np.linspace(0, 1, 32, dtype=np.float32).reshape(8, 4)
adjacency = sp.random(6, 6, density=0.3, format="csr", random_state=0)

hurray.save(
    path,
    {"proj.weight": weight, "embedding": embedding, "graph": adjacency},
    metadata={"model": "demo", "step": 1000, "lr": 3e-4, "ema": True},
)
print(f"saved {path}")

with hurray.open(path, verify=True) as f:
    print("tensors:", f.keys())
    print("metadata:", f.metadata)
    w = f["proj.weight"]
    rows = f.get_slice("embedding", 2, 4)  # reads only those rows
    graph = f["graph"]
# The file is closed; the tensors still point into its mapping.
print("proj.weight:", w.descriptor.quantization)
print("dequantized row 1:", w.dequantize()[1, :4])
print("embedding rows 2..3:", rows.numpy().tolist())
assert (graph.to_scipy() != adjacency).nnz == 0

# In-process handoff: one capsule carries every buffer, no copies.
received = hurray.from_hurray(w)
assert received._buffer_address(1) == w._buffer_address(1)
print("capsule handoff of", received.buffer_count, "buffers: zero-copy")
