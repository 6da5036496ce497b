"""torch.distributed.checkpoint: save and load time and peak memory of the
hurray storage backend against DCP's default FileSystemWriter/Reader and its
HuggingFace safetensors storage, in one run, at world sizes 2 and 4.

    .venv/bin/python bench/bench_dcp.py

The state is the same for every backend: a stack of DCP_BENCH_LAYERS
linear layers (1024 x 1024 weight + bias, float32) plus Adam's state for
them (exp_avg, exp_avg_sq, step), every tensor a DTensor cut by rows over
the ranks (as FSDP2 keeps it). Non-tensor items are left out because
DCP's safetensors storage cannot hold them. Each (backend, world size) runs
in a fresh gloo group of ranks forked from this process (torch imported
once), one intra-op thread per rank:

  save      dcp.save into an empty directory (fsync'd by every backend)
  load      dcp.load into a pre-allocated zero state of the same placement,
            after the checkpoint's pages were dropped from the page cache
            (sync + posix_fadvise DONTNEED), then checked value for value
  load 4->2 the world-size-4 checkpoint loaded by 2 ranks (resharding)
  hurray also loads with verify=True (every checksum checked) and with
  mmap=False (pread into private memory instead of copying from the mapping)

Time is the slowest rank's; peak memory is the largest growth of a rank's
peak RSS (VmHWM, reset through /proc/self/clear_refs) over its RSS just
before the operation. Medians of DCP_BENCH_REPS repetitions.

Environment: DCP_BENCH_LAYERS (default 32: 128 MiB of parameters, 384 MiB
of state), DCP_BENCH_REPS (3), DCP_BENCH_DIR (build/bench-dcp-tmp),
DCP_BENCH_OUT (bench/results: dcp.md, dcp.json).
"""

import json
import os
import platform
import shutil
import socket
import statistics
import sys
import time
import warnings

import torch
import torch._dynamo  # noqa: F401 - imported once, inherited by the forked ranks
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

from hurray.torch.dcp import HurrayStorageReader, HurrayStorageWriter

try:
    from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
except ImportError:  # older torch
    HuggingFaceStorageReader = HuggingFaceStorageWriter = None

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D = 1024
LAYERS = int(os.environ.get("DCP_BENCH_LAYERS", "32"))
REPS = int(os.environ.get("DCP_BENCH_REPS", "3"))
WORK = os.path.abspath(
    os.environ.get("DCP_BENCH_DIR", os.path.join(REPO, "build", "bench-dcp-tmp"))
)
OUT = os.path.abspath(os.environ.get("DCP_BENCH_OUT", os.path.join(REPO, "bench", "results")))
MIB = 1 << 20


def _backends():
    out = {
        "hurray": (lambda p: HurrayStorageWriter(p), lambda p: HurrayStorageReader(p)),
        "torch FileSystem": (lambda p: FileSystemWriter(p), lambda p: FileSystemReader(p)),
    }
    if HuggingFaceStorageWriter is not None:
        out["torch HF safetensors"] = (
            lambda p: HuggingFaceStorageWriter(p, save_distributed=True),
            lambda p: HuggingFaceStorageReader(p),
        )
    return out


BACKENDS = _backends()


# ------------------------------------------------------------------- state


def _tensors():
    """(name, global shape) of every tensor of the state."""
    for i in range(LAYERS):
        for pname, shape in ((f"layers.{i}.weight", (D, D)), (f"layers.{i}.bias", (D,))):
            yield pname, shape


def _values(seed, shape, rows):
    """Rows [rows.start, rows.stop) of a deterministic global tensor."""
    cols = 1
    for s in shape[1:]:
        cols *= s
    flat = torch.arange(rows.start * cols, rows.stop * cols, dtype=torch.int64)
    return (
        ((flat * 7 + seed) % 65521)
        .to(torch.float32)
        .mul_(1e-3)
        .reshape((rows.stop - rows.start,) + tuple(shape[1:]))
    )


def make_state(rank, world_size, mesh, zero):
    """The model and Adam state, each tensor a DTensor of Shard(0)."""
    model, optim = {}, {}
    seed = 0
    per = D // world_size
    rows = range(rank * per, (rank + 1) * per)

    def dtensor(shape):
        nonlocal seed
        seed += 1
        local = torch.zeros((per,) + tuple(shape[1:])) if zero else _values(seed, shape, rows)
        return DTensor.from_local(
            local,
            mesh,
            [Shard(0)],
            run_check=False,
            shape=torch.Size(shape),
            stride=torch.empty(shape, device="meta").stride(),
        )

    for name, shape in _tensors():
        model[name] = dtensor(shape)
        optim[name] = {
            "step": torch.tensor(0.0 if zero else 1.0),
            "exp_avg": dtensor(shape),
            "exp_avg_sq": dtensor(shape),
        }
    return {"model": model, "optim": {"state": optim}}


def state_bytes():
    total = 0
    for _, shape in _tensors():
        n = 1
        for s in shape:
            n *= s
        total += 3 * 4 * n + 4
    return total


def check_state(state, expected):
    """Values are a function of the global position alone, so the state a
    rank saves is also what it must load, whichever world size saved it."""
    for a, b in zip(_leaves(state), _leaves(expected)):
        la = a.to_local() if isinstance(a, DTensor) else a
        lb = b.to_local() if isinstance(b, DTensor) else b
        if not torch.equal(la, lb):
            raise AssertionError("a loaded value differs from the saved one")


def _leaves(obj):
    if isinstance(obj, dict):
        for k in obj:
            yield from _leaves(obj[k])
    else:
        yield obj


# ---------------------------------------------------------------- measures


def _rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(fn):
    """(seconds, MiB of peak RSS growth) of fn on this rank."""
    dist.barrier()
    before = _rss_kib("VmRSS")
    _reset_peak()  # without it VmHWM is the process's lifetime peak (reported)
    t0 = time.perf_counter()
    fn()
    seconds = time.perf_counter() - t0
    peak = _rss_kib("VmHWM")
    dist.barrier()
    return seconds, max(peak - before, 0) / 1024


def drop_cache(path):
    """Push the checkpoint out of the page cache (best effort)."""
    os.sync()
    for root, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def du(path):
    return sum(os.path.getsize(os.path.join(r, n)) for r, _, fs in os.walk(path) for n in fs)


def _gather(value):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def bench_rank(rank, world_size, backend, results_path):
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    writer_of, reader_of = BACKENDS[backend]
    mesh = init_device_mesh("cpu", (world_size,))
    source = make_state(rank, world_size, mesh, zero=False)
    path = os.path.join(WORK, f"{backend.replace(' ', '_')}-ws{world_size}")
    runs = {"save": [], "load": []}
    extra = {}
    for _ in range(REPS):
        if rank == 0:
            shutil.rmtree(path, ignore_errors=True)
        dist.barrier()
        runs["save"].append(
            _gather(measure(lambda: dcp.save(source, storage_writer=writer_of(path))))
        )
        if rank == 0:
            drop_cache(path)
        target = make_state(rank, world_size, mesh, zero=True)
        runs["load"].append(
            _gather(measure(lambda: dcp.load(target, storage_reader=reader_of(path))))
        )
        check_state(target, source)
        del target
    if backend == "hurray":  # the same load checking every checksum, and with pread
        for op, options in (
            ("load (verify=True)", {"verify": True}),
            ("load (mmap=False)", {"mmap": False}),
        ):
            runs[op] = []
            for _ in range(REPS):
                if rank == 0:
                    drop_cache(path)
                target = make_state(rank, world_size, mesh, zero=True)
                runs[op].append(
                    _gather(
                        measure(
                            lambda: dcp.load(
                                target, storage_reader=HurrayStorageReader(path, **options)
                            )
                        )
                    )
                )
                check_state(target, source)
                del target
    if world_size == 2:  # reshard: the checkpoint of world size 4
        src = os.path.join(WORK, f"{backend.replace(' ', '_')}-ws4")
        if os.path.isdir(src):
            runs["load 4->2"] = []
            for _ in range(REPS):
                if rank == 0:
                    drop_cache(src)
                target = make_state(rank, world_size, mesh, zero=True)
                runs["load 4->2"].append(
                    _gather(measure(lambda: dcp.load(target, storage_reader=reader_of(src))))
                )
                check_state(target, source)
                del target
    if rank == 0:
        extra["bytes_on_disk"] = du(path)
        extra["peak_reset"] = _reset_peak()
        with open(results_path, "w") as f:
            json.dump({"runs": runs, **extra}, f)


def _rank_main(rank, world_size, port, backend, results_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        bench_rank(rank, world_size, backend, results_path)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ report


def summarize(per_rep):
    """per_rep: [[(seconds, mib) per rank] per repetition]."""
    times = [max(t for t, _ in ranks) for ranks in per_rep]
    mems = [max(m for _, m in ranks) for ranks in per_rep]
    return {
        "seconds": {"median": statistics.median(times), "min": min(times), "max": max(times)},
        "peak_mib_per_rank": {"median": statistics.median(mems), "max": max(mems)},
        "reps": len(per_rep),
    }


def main():
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(OUT, exist_ok=True)
    total = state_bytes()
    results = {}
    started = time.time()
    load_before = os.getloadavg()[0]
    for world_size in (4, 2):  # 4 first: the 2-rank run also reshards its checkpoint
        for backend in BACKENDS:
            out = os.path.join(WORK, f"result-{backend.replace(' ', '_')}-{world_size}.json")
            t0 = time.time()
            mp.start_processes(
                _rank_main,
                args=(world_size, _free_port(), backend, out),
                nprocs=world_size,
                start_method="fork",
                join=True,
            )
            with open(out) as f:
                raw = json.load(f)
            results.setdefault(backend, {})[world_size] = {
                "ops": {op: summarize(v) for op, v in raw["runs"].items()},
                "bytes_on_disk": raw["bytes_on_disk"],
                "peak_reset": raw["peak_reset"],
            }
            print(f"{backend:22s} ws={world_size}: {time.time() - t0:5.1f} s", flush=True)
    shutil.rmtree(WORK, ignore_errors=True)
    config = {
        "layers": LAYERS,
        "hidden": D,
        "state_bytes": total,
        "reps": REPS,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "seconds_total": round(time.time() - started, 1),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    with open(os.path.join(OUT, "dcp.json"), "w") as f:
        json.dump({"config": config, "results": results}, f, indent=1)
    md = render(config, results)
    with open(os.path.join(OUT, "dcp.md"), "w") as f:
        f.write(md)
    print(md)


def render(config, results):
    mib = config["state_bytes"] / MIB
    lines = [
        "# torch.distributed.checkpoint: hurray vs DCP's own storage",
        "",
        f"State: {config['layers']} layers of {config['hidden']}x{config['hidden']} weight + "
        f"bias (float32) and Adam's exp_avg, exp_avg_sq and step: {mib:.0f} MiB, every tensor "
        "a DTensor cut by rows over the ranks. gloo on CPU, ranks forked from one process, "
        f"one thread each; {config['cpus']} CPUs; torch {config['torch']}. Medians of "
        f"{config['reps']} runs; time is the slowest rank's, memory the largest growth of "
        "one rank's peak RSS over its RSS before the call. Loads read a checkpoint whose "
        "pages were dropped from the page cache, into pre-allocated tensors, and are "
        "checked value for value.",
        "",
        "| world size | backend | save s | save MiB/s | save peak MiB/rank | load s | "
        "load MiB/s | load peak MiB/rank | on disk MiB |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for world_size in (2, 4):
        for backend, per_ws in results.items():
            r = per_ws.get(world_size)
            if r is None:
                continue
            ops = r["ops"]
            s, lo = ops["save"], ops["load"]
            lines.append(
                f"| {world_size} | {backend} | {s['seconds']['median']:.2f} | "
                f"{mib / s['seconds']['median']:.0f} | {s['peak_mib_per_rank']['median']:.0f} | "
                f"{lo['seconds']['median']:.2f} | {mib / lo['seconds']['median']:.0f} | "
                f"{lo['peak_mib_per_rank']['median']:.0f} | {r['bytes_on_disk'] / MIB:.0f} |"
            )
    lines += [
        "",
        "Other loads (same state, same measures):",
        "",
        "| world size | backend | load | s | MiB/s | peak MiB/rank |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for world_size in (2, 4):
        for backend, per_ws in results.items():
            r = per_ws.get(world_size)
            if r is None:
                continue
            for op, v in r["ops"].items():
                if op in ("save", "load"):
                    continue
                lines.append(
                    f"| {world_size} | {backend} | {op} | {v['seconds']['median']:.2f} "
                    f"| {mib / v['seconds']['median']:.0f} | "
                    f"{v['peak_mib_per_rank']['median']:.0f} |"
                )
    lines += [
        "",
        f"Whole run: {config['seconds_total']} s; 1-minute load average "
        f"{config['load_average'][0]} before, {config['load_average'][1]} after "
        f"(other work on the machine skews the figures).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
