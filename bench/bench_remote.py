"""Remote reading over HTTP range requests with added latency per request
(`make bench-remote`): hurray.open/load of a URL against safetensors read
the way huggingface_hub does it, over the same local server
(tests/python/range_server.py, 127.0.0.1 only, LATENCY seconds slept before
each answer). Writes bench/results/remote.md.

safetensors, huggingface_hub style (hf_api.get_safetensors_metadata): one
request for the first 100,000 bytes (the 8-byte header length and, usually,
the JSON header), a second if the header is longer; then either one range
request per tensor (lazy loading; sequential, and with the same 8 threads
hurray uses) or one GET of the whole file.

Environment: BENCH_REMOTE_LATENCY (seconds, default 0.02), BENCH_REMOTE_REPS
(default 3), BENCH_REMOTE_TENSORS (default 128), BENCH_REMOTE_TENSOR_KIB
(default 256).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import statistics
import struct
import sys
import tempfile
import time

import numpy as np
import urllib3

import hurray

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))
from range_server import RangeServer  # noqa: E402

LATENCY = float(os.environ.get("BENCH_REMOTE_LATENCY", "0.02"))
REPS = int(os.environ.get("BENCH_REMOTE_REPS", "3"))
COUNT = int(os.environ.get("BENCH_REMOTE_TENSORS", "128"))
KIB = int(os.environ.get("BENCH_REMOTE_TENSOR_KIB", "256"))
THREADS = 8


def make_files(folder):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {
        f"model.layers.{i:03d}.mlp.weight": rng.standard_normal(
            KIB * 256, dtype=np.float32
        ).reshape(-1, 64)
        for i in range(COUNT)
    }
    hp = os.path.join(folder, "m.hurray")
    sp = os.path.join(folder, "m.safetensors")
    hurray.save(hp, tensors)
    save_file(tensors, sp)
    return tensors, open(hp, "rb").read(), open(sp, "rb").read()


class SafetensorsHF:
    """huggingface_hub's way: ranged header fetch, then ranges per tensor."""

    def __init__(self, pool, url):
        self.pool, self.url = pool, url
        first = self._range(0, 100_000)
        n = struct.unpack("<Q", first[:8])[0]
        if 8 + n > len(first):
            first += self._range(len(first), 8 + n)
        self.header = json.loads(first[8 : 8 + n])
        self.header.pop("__metadata__", None)
        self.base = 8 + n

    def _range(self, start, end):
        r = self.pool.request("GET", self.url, headers={"Range": f"bytes={start}-{end - 1}"})
        assert r.status == 206, r.status
        return r.data

    def tensor(self, name):
        info = self.header[name]
        a, b = info["data_offsets"]
        data = self._range(self.base + a, self.base + b)
        return np.frombuffer(data, dtype=np.float32).reshape(info["shape"])

    def load_sequential(self):
        return {n: self.tensor(n) for n in self.header}

    def load_parallel(self):
        with concurrent.futures.ThreadPoolExecutor(THREADS) as ex:
            return dict(zip(self.header, ex.map(self.tensor, self.header)))

    def load_whole(self):
        from safetensors.numpy import load

        r = self.pool.request("GET", self.url)
        return load(r.data)


def timed(fn):
    times, result = [], None
    for _ in range(REPS):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tensors, hbytes, sbytes = make_files(folder)
    one = next(iter(tensors))
    rows = []
    with RangeServer({"/m.hurray": hbytes, "/m.safetensors": sbytes}, latency=LATENCY) as s:
        hurl, surl = s.url("/m.hurray"), s.url("/m.safetensors")
        pool = urllib3.PoolManager(maxsize=THREADS)

        def measure(label, fn, check=None):
            s.reset()
            t, result = timed(fn)
            requests = s.requests // REPS
            mib = s.bytes_sent / REPS / 2**20
            if check is not None:
                check(result)
            rows.append((label, t, requests, mib))
            print(f"{label:<58} {t * 1000:9.1f} ms {requests:6d} req {mib:8.2f} MiB", flush=True)

        def same_all(result):
            for name, want in tensors.items():
                assert np.array_equal(np.asarray(result[name]), want), name

        def same_one(result):
            assert np.array_equal(np.asarray(result), tensors[one])

        measure("hurray: open (trailer+index, header)", lambda: hurray.open(hurl).close())
        measure(
            "safetensors (hf_hub style): open (header ranges)", lambda: SafetensorsHF(pool, surl)
        )

        def h_one():
            with hurray.open(hurl) as f:
                return f[one]

        measure("hurray: open + one tensor", h_one, same_one)
        measure(
            "safetensors (hf_hub style): open + one tensor",
            lambda: SafetensorsHF(pool, surl).tensor(one),
            same_one,
        )
        measure(
            f"hurray: load (ranges merged, 16 MiB pieces on {THREADS} threads)",
            lambda: hurray.load(hurl),
            same_all,
        )
        measure("hurray: load, pieces on 1 thread", lambda: hurray.load(hurl, threads=1), same_all)
        measure(
            f"safetensors (hf_hub style): load, ranges on {THREADS} threads",
            lambda: SafetensorsHF(pool, surl).load_parallel(),
            same_all,
        )
        measure(
            "safetensors (hf_hub style): load, ranges one by one",
            lambda: SafetensorsHF(pool, surl).load_sequential(),
            same_all,
        )
        measure(
            "safetensors: load, one GET of the whole file",
            lambda: SafetensorsHF(pool, surl).load_whole(),
            same_all,
        )
    out = os.path.join(HERE, "results", "remote.md")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("# Remote reading over HTTP range requests\n\n")
        f.write(
            f"`make bench-remote` (bench/bench_remote.py): {COUNT} float32 tensors of "
            f"{KIB} KiB ({COUNT * KIB / 1024:.0f} MiB) served by tests/python/range_server.py "
            f"on 127.0.0.1 with {LATENCY * 1000:.0f} ms slept before each answer; median of "
            f"{REPS} runs; requests and bytes per run as the server counted them. "
            "safetensors is read the way huggingface_hub does (first 100,000 bytes for the "
            "header, then ranges), on a urllib3 pool like hurray's.\n\n"
        )
        f.write("| what | time (ms) | requests | MiB sent |\n|---|---:|---:|---:|\n")
        for label, t, requests, mib in rows:
            f.write(f"| {label} | {t * 1000:.1f} | {requests} | {mib:.2f} |\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
