"""Times the steps of `make bench` into results/bench-run.json, so that the
15-minute budget is measured rather than assumed (goals19.py reports it).

    timed.py start                # a fresh record, load average at the start
    timed.py step NAME -- CMD...  # runs CMD, records its wall time; exit status passed on
    timed.py finish               # total wall time since start, load average at the end
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

PATH = os.path.join(
    os.environ.get(
        "BENCH_OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    ),
    "bench-run.json",
)


def _read():
    try:
        with open(PATH) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"started": time.time(), "loadavg_start": list(os.getloadavg()), "steps": {}}


def _write(rec):
    os.makedirs(os.path.dirname(PATH), exist_ok=True)
    with open(PATH, "w") as f:
        json.dump(rec, f, indent=1)


def main(argv):
    if argv[:1] == ["start"]:
        _write({"started": time.time(), "loadavg_start": list(os.getloadavg()), "steps": {}})
        return 0
    if argv[:1] == ["finish"]:
        rec = _read()
        rec["total_s"] = time.time() - rec["started"]
        rec["loadavg_end"] = list(os.getloadavg())
        _write(rec)
        print(f"make bench: {rec['total_s']:.0f} s in all (budget 900 s)")
        return 0
    if len(argv) >= 3 and argv[0] == "step" and argv[2] == "--":
        t0 = time.time()
        rc = subprocess.call(argv[3:])
        rec = _read()
        rec["steps"][argv[1]] = time.time() - t0
        _write(rec)
        return rc
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
