"""Issue 19's goals in one table, from the results files of the last runs:
latest.json (make bench: bench.py), verify.json (bench_verify.py), quant.json
(make bench-quant), scaling.json (make bench-scaling) and bench-run.json (the
timed `make bench`, scripts in bench/timed.sh). Writes results/goals.md and
prints it; `make bench` and `make bench-quant` end with it. Each row names the
file its figures come from and that file's load average, since the files can
come from different runs.

    .venv/bin/python bench/goals19.py [results-dir]
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(d, name):
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _med(s):
    return s["median"] if isinstance(s, dict) else None


def _spread(s, scale=1.0, fmt="{:.2f}"):
    if not isinstance(s, dict):
        return "n/a"
    return (
        f"{fmt.format(s['median'] * scale)} ({fmt.format(s['min'] * scale)}–"
        f"{fmt.format(s['max'] * scale)}, n={s['n']})"
    )


def _paired(slow, fast):
    """Each repetition's ratio slow / fast, as " (paired: median, min-max)", where
    both summaries hold their runs in order (bench.py's contenders take turns,
    so run i of each came from the same minutes); "" for older results."""
    a, b = (slow or {}).get("values"), (fast or {}).get("values")
    if not a or not b or len(a) != len(b):
        return ""
    r = [x / y for x, y in zip(a, b)]
    return f" (per repetition: {statistics.median(r):.2f}x, {min(r):.2f}–{max(r):.2f})"


def _faster(c, key):
    """The summary of the faster safetensors front end by median."""
    return min((c[k][key] for k in ("safetensors.numpy", "safetensors.torch") if k in c), key=_med)


def _la(cfg, key="loadavg_start"):
    v = (cfg or {}).get(key)
    return "n/a" if not v else "/".join(f"{x:.1f}" for x in v[:3])


def _mark(ok):
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def gpu_line(d):
    """The GPU goal, from bench_cuda.py's run on a lent GPU machine
    (results/cuda.json); this bench never depends on one."""
    run = _load(d, "cuda.json")
    if run and "limit" in run:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import bench_cuda

        bench_cuda.report(run)  # fills run["goal"]
        g = run["goal"]
        text = (
            f"{run['gpu']}: 1 GiB to cuda, warm, at {g['later']:.2f}x the pinned host-to-device "
            f"limit of {g['limit_GBs']:.1f} GB/s in later calls, {g['first']:.2f}x in a "
            f"process's first call (safetensors {g['safetensors'][1]:.2f}x / "
            f"{g['safetensors'][0]:.2f}x); the staging fill alone (page cache into pinned "
            f"memory, no GPU) reaches {g['fill']:.2f}x"
        )
        return text, f"cuda.md, load {_la(run)}", g["later"] >= 0.8
    found = glob.glob("/dev/nvidia[0-9]*")
    try:
        import torch

        cuda = torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - torch missing or broken: no CUDA either way
        cuda = False
    if cuda or found:
        return "a GPU is present: run `make bench-cuda` for this goal", "—", None
    return (
        "**no GPU lent**: none on this machine (no /dev/nvidia*, torch.cuda.is_available() "
        "False) and no results/cuda.json from a lent one; "
        "the pinned-staging load to `cuda` vs the host-to-device limit is not measured",
        "—",
        None,
    )


def rows_bench(d):
    """(goal, figure, source, verdict) rows for `make bench`."""
    out = []
    latest = _load(d, "latest.json")
    verify = _load(d, "verify.json")
    if verify:
        parts, oks = [], []
        for name, pairs in verify.get("pairs", {}).items():
            ratios = [p["ratio"] for p in pairs]
            m = statistics.median(ratios)
            inplace = [p["inplace_ratio"] for p in pairs if "inplace_ratio" in p]
            extra = f", {statistics.median(inplace):.2f}x the file read in place" if inplace else ""
            parts.append(
                f"{name} {m:.2f}x ({min(ratios):.2f}–{max(ratios):.2f}, n={len(ratios)}{extra})"
            )
            oks.append(m >= 0.9)
        la = "/".join(f"{x:.1f}" for x in verify.get("load", [[0, 0, 0]])[0])
        out.append(
            (
                "verify >= 0.9x the multi-threaded memory-read rate",
                "; ".join(parts) + f" ({verify.get('threads')} threads)",
                f"verify.json, load {la}",
                _mark(all(oks) if oks else None),
            )
        )
    if latest:
        cfg = latest["config"]
        src = f"latest.json, load {_la(cfg)}"
        if "mem_read" in latest.get("limits", {}):
            mr = _med(latest["limits"]["mem_read"])
            b = latest["workloads"]["many"]["contenders"]["hurray"]
            a = latest["workloads"]["large"]["contenders"]["hurray"]
            va, vb = _med(a["verify_gbps"]), _med(b["verify_gbps"])
            inplace = ""
            if "inplace_gbps" in a and "inplace_gbps" in b:
                ia, ib = _med(a["inplace_gbps"]), _med(b["inplace_gbps"])
                inplace = (
                    f"; the file read in place {ia:.1f}, {ib:.1f} GB/s, verify "
                    f"{va / ia:.2f}x, {vb / ib:.2f}x of it"
                )
            out.append(
                (
                    "verify in bench.py (warm, after load-all) >= 0.9x memory-read",
                    f"(a) {va:.1f}, (b) {vb:.1f} GB/s vs {mr:.1f} GB/s ({va / mr:.2f}x, "
                    f"{vb / mr:.2f}x){inplace}",
                    src,
                    _mark(min(va, vb) >= 0.9 * mr),
                )
            )
        w = latest["workloads"]["many"]
        c = w["contenders"]
        h = c["hurray"]
        sts = _faster(c, "save_s")
        st, hs = _med(sts), _med(h["save_s"])
        lim = _med(w["limits"]["plain_write_s"])
        out.append(
            (
                "save 20k small >= 1.2x safetensors and >= 0.9x the plain-write limit",
                f"hurray {_spread(h['save_s'])} s: {st / hs:.2f}x the faster safetensors"
                f"{_paired(sts, h['save_s'])}, {lim / hs:.2f}x the limit",
                src,
                _mark(st / hs >= 1.2 and lim / hs >= 0.9),
            )
        )
        so, ho = _med(c["safetensors.numpy"]["open_s"]), _med(h["open_s"])
        out.append(
            (
                "open with every shape, 20k >= 3x safe_open",
                f"hurray {_spread(h['open_s'], 1e3)} ms vs safe_open "
                f"{_spread(c['safetensors.numpy']['open_s'], 1e3)} ms = {so / ho:.2f}x",
                src,
                _mark(so / ho >= 3),
            )
        )
        sls = _faster(c, "load_s")
        sl, hl = _med(sls), _med(h["load_s"])
        out.append(
            (
                "load-all 20k >= 2x safetensors",
                f"hurray {_spread(h['load_s'])} s vs the faster safetensors {_spread(sls)} s = "
                f"{sl / hl:.2f}x{_paired(sls, h['load_s'])}",
                src,
                _mark(sl / hl >= 2),
            )
        )
    out.extend(rows_affine(d))
    out.extend(rows_every_kind(d))
    scaling = _load(d, "scaling.json")
    if scaling:
        out.extend(rows_scaling(scaling))
    run = _load(d, "bench-run.json")
    if run and "total_s" in run:  # absent while make bench is still running
        total = run["total_s"]
        steps = ", ".join(f"{k} {v:.0f} s" for k, v in run["steps"].items())
        out.append(
            (
                "the whole `make bench` within 15 minutes",
                f"{total:.0f} s ({steps})",
                f"bench-run.json, load {_la(run)}",
                _mark(total <= 900),
            )
        )
    text, source, ok = gpu_line(d)
    out.append(
        ("GPU: load 1 GiB to cuda >= 80% of the host-to-device limit", text, source, _mark(ok))
    )
    return out


def rows_affine(d):
    q = _load(d, "quant.json")
    if not q:
        return []
    h = q["hurray"].get("affine", {})
    t = q["references"].get("torch.quantize_per_tensor") or {}
    th = t.get("threads", 2)
    hq, hd = h.get(f"q{th}_gbps"), h.get(f"dq{th}_gbps")
    if not (hq and hd and t.get("q") and t.get("dq")):
        return []
    rq, rd = _med(hq) / _med(t["q"]), _med(hd) / _med(t["dq"])
    return [
        (
            "per-tensor affine quantize and dequantize >= 1.0x torch's fbgemm",
            f"quantize {_spread(hq)} vs {_spread(t['q'])} GB/s = {rq:.2f}x; dequantize "
            f"{_spread(hd)} vs {_spread(t['dq'])} GB/s = {rd:.2f}x ({th} threads)",
            f"quant.json, load {_la(q['config'])}",
            _mark(rq >= 1.0 and rd >= 1.0),
        )
    ]


def rows_every_kind(d):
    """The dequantize goal for the kinds of the converters (zoo_float,
    zoo_int4, gguf_types), which quant.md's Goals table does not cover."""
    parts, below, n, sources, loads = [], [], 0, [], []
    for name, key in (
        ("zoo_float.json", "format"),
        ("zoo_int4.json", "case"),
        ("gguf_types.json", "type"),
    ):
        f = _load(d, name)
        rows = [r for r in (f or {}).get("rows", []) if "out" in r]
        if not rows:
            continue
        sources.append(name)
        n += len(rows)
        ratios = [r["out"]["ratio"] for r in rows]
        loads += [r["out"]["load1"] for r in rows if "load1" in r["out"]]
        parts.append(f"{name.split('.')[0]} {min(ratios):.2f}-{max(ratios):.2f}")
        below += [f"{r[key]} {r['out']['ratio']:.2f}" for r in rows if not r["out"]["met"]]
    if not n:
        return []
    figure = f"{n} kinds: " + "; ".join(parts)
    figure += f"; below 0.50: {', '.join(below)}" if below else "; none below 0.50"
    return [
        (
            "dequantize into out=, one thread, >= 0.50x memcpy: the converters' kinds",
            figure,
            ", ".join(sources)
            + (f", load {min(loads):.1f}-{max(loads):.1f} during the pairs" if loads else ""),
            _mark(not below),
        )
    ]


def rows_scaling(s):
    sys.path.insert(0, HERE)
    from bench_scaling import is_linear, open_rss_goal

    counts = s["config"]["counts"]
    fits = s["fits"]["hurray"]
    top = s["points"][str(max(counts))]["hurray"]
    keys = ("save_cpu_s", "open_cpu_s", "load_cpu_s", "save_growth_mib", "load_growth_mib")
    slopes = ", ".join(
        f"{k} {fits[k]['loglog_last']:.2f}" for k in keys if fits.get(k) and fits[k]["loglog_last"]
    )
    lin = all(is_linear(fits.get(k)) for k in keys)
    rss = open_rss_goal(s)
    n, g, i, _ = rss[-1]
    return [
        (
            f"{max(counts):,} tensors: time and memory linear in the count",
            f"log-log slopes between the two largest counts (time as CPU seconds): {slopes}; at {max(counts):,}: save "
            f"{_med(top['save_s']):.2f} s, open {_med(top['open_s']):.2f} s, load-all "
            f"{_med(top['load_s']):.2f} s, save peak RSS {_med(top['save_peak_rss_mib']):.0f} MiB",
            f"scaling.json, load {_la(s['config'])}",
            _mark(lin),
        ),
        (
            "RSS during open <= 2x the index size + a constant",
            f"at {n:,}: {g:.1f} MiB for an index of {i:.1f} MiB",
            "scaling.json",
            _mark(all(ok for *_, ok in rss)),
        ),
    ]


def render(d):
    rows = rows_bench(d)
    L = [
        "# Issue 19 goals — met / not met\n",
        f"Generated by `bench/goals19.py` at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        "from the results files named in the source column (medians of fresh processes, "
        "min–max and the number of processes in brackets; the load average is that file's, "
        "at its start). The per-scheme dequantize goals are in quant.md's Goals table.\n",
        "| goal | figure | source | verdict |",
        "|---|---|---|---|",
    ]
    L += [f"| {g} | {f} | {s} | {v} |" for g, f, s, v in rows]
    return "\n".join(L) + "\n"


def refresh_latest(d, md):
    """latest.md carries this table as bench.py saw it, before the parts of
    `make bench` that run after bench.py (bench_verify, bench_scaling) and
    before any later `make bench-quant`; it is redone here with theirs."""
    path = os.path.join(d, "latest.md")
    head = "## Issue 19 goals\n"
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return
    start = text.find(head)
    end = text.find("\n## ", start + len(head))
    if start < 0 or end < 0:
        return
    body = "\n".join([head, *md.splitlines()[2:], "", ""])
    with open(path, "w") as f:
        f.write(text[:start] + body + text[end + 1 :])


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "results")
    md = render(d)
    with open(os.path.join(d, "goals.md"), "w") as f:
        f.write(md)
    refresh_latest(d, md)
    print(md)


if __name__ == "__main__":
    main()
