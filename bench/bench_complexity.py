"""Growth of the work hostile-but-valid inputs ask for: each case is timed
at n and 4n, in this process, and the log-log slope printed. Linear work has
a slope near 1; the cases here were quadratic (slope 2 or more) before
session 41 (metadata keys found by scanning a list, duplicate tensor names
and GGUF tensor order checked the same way, empty or high-rank shard
tilings compared pair by pair, compressed-tensors targets matched one by one).

usage: .venv/bin/python bench/bench_complexity.py [n]   (make bench-complexity)
"""

import itertools
import json
import math
import os
import struct
import sys
import tempfile
import time

import numpy as np

import hurray
from hurray._shards import overlapping_pair


def _safetensors_with_keys(path, n):
    header = {"__metadata__": {f"key{i:08d}": "v" for i in range(n)}}
    header["t"] = {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"\0\0\0\0")


def case_safetensors_metadata(tmp, n):
    src = os.path.join(tmp, f"m{n}.safetensors")
    _safetensors_with_keys(src, n)
    return lambda: hurray.convert(src, os.path.join(tmp, f"m{n}.hurray"), quiet=True)


def case_many_tensors_to_gguf(tmp, n):
    src = os.path.join(tmp, f"t{n}.hurray")
    hurray.save(src, {f"blk.{i}.weight": np.ones(1, np.float32) for i in range(n)})
    return lambda: hurray.convert(src, os.path.join(tmp, f"t{n}.gguf"), quiet=True)


def case_gguf_tensor_order(tmp, n):
    src = os.path.join(tmp, f"o{n}.hurray")
    order = json.dumps([f"absent.{i}" for i in range(50 * n)])
    hurray.save(
        src,
        {f"w{i}": np.ones(1, np.float32) for i in range(n)},
        {"gguf.__tensors__": order},
    )
    return lambda: hurray.convert(src, os.path.join(tmp, f"o{n}.gguf"), quiet=True)


def case_high_rank_tiling(tmp, n):
    rank = max(1, round(math.log2(n)))
    boxes = [(b, tuple(x + 1 for x in b)) for b in itertools.product((0, 1), repeat=rank)]
    return lambda: overlapping_pair(boxes)


def case_empty_chunks(tmp, n):
    boxes = [((0, 0), (1, 0))] * n + [((0, 0), (1, 1))]
    return lambda: overlapping_pair(boxes)


CASES = {
    "safetensors __metadata__ keys -> hurray": case_safetensors_metadata,
    "hurray tensors -> GGUF": case_many_tensors_to_gguf,
    "GGUF tensor order list (50 entries a tensor)": case_gguf_tensor_order,
    "overlap check, rank-log2(n) tiling of n pieces": case_high_rank_tiling,
    "overlap check, n empty chunks": case_empty_chunks,
}


def best_of(fn, reps=3):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    print(f"load average {os.getloadavg()}")
    print(f"{'case':48} {'n':>8} {'t(n) s':>9} {'t(4n) s':>9} {'slope':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in CASES.items():
            small, large = best_of(make(tmp, n)), best_of(make(tmp, 4 * n))
            slope = math.log(large / small, 4) if small > 0 and large > 0 else float("nan")
            print(f"{name:48} {n:>8} {small:>9.4f} {large:>9.4f} {slope:>6.2f}")


if __name__ == "__main__":
    main()
