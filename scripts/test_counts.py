#!/usr/bin/env python3
"""Counts every suite's tests for `make test`'s last line.

test_counts.py run NAME -- COMMAND...
    Runs COMMAND (its output goes through unchanged) and exits with its
    status. When HURRAY_TEST_RESULTS names a folder (make test sets it), it
    also records there how many tests COMMAND passed, failed and skipped,
    read from the summaries it prints: meson test's "Ok: / Fail: /
    Skipped:" block, pytest's "N passed, N failed ... in Xs" line,
    check_vectors.py's "N vectors, N failed", fuzz/run.sh's per-target
    lines, and lines of the form "[WORD: ]N passed, N failed[, N skipped]"
    (the other scripts). A command that prints none counts as one test;
    one that fails without reporting a failure counts one more.
test_counts.py done NAME
    Records NAME as one passed test (the last line of a recipe: it is
    reached only if every line before it succeeded).
test_counts.py summary MAKE_STATUS SUITE...
    Prints a line per suite and, last, the total:
      total: N passed, N failed, N skipped
    A SUITE with no record did not run to the end (a prerequisite failed)
    and counts as one failure. Exits 1 if anything failed or MAKE_STATUS
    is not 0.
"""

import json
import os
import re
import subprocess
import sys

ENV = "HURRAY_TEST_RESULTS"

PYTEST = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+)\s+in [\d.]+s(?: \([\d:]+\))?\s*=*$")
PYTEST_ITEM = re.compile(r"(\d+) (\w+)")
MESON = re.compile(r"^(Ok|Expected Fail|Fail|Unexpected Pass|Skipped|Timeout):\s+(\d+)\s*$")
VECTORS = re.compile(r"^(\d+) vectors, (\d+) failed$")
FUZZ_RAN = re.compile(r"^fuzz: (\S+): \d+ executions$")
FUZZ_FAILED = re.compile(r"^fuzz: (\S+) FAILED")
EXPLICIT = re.compile(r"^(?:[A-Za-z][\w.-]*: )?(\d+) passed, (\d+) failed(?:, (\d+) skipped)?$")


class Counts:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0
        self.seen = False

    def add(self, passed=0, failed=0, skipped=0):
        self.passed += passed
        self.failed += failed
        self.skipped += skipped
        self.seen = True

    def line(self, raw):
        line = raw.rstrip("\n").strip()
        m = PYTEST.match(line)
        if m:
            items = {kind: int(n) for n, kind in PYTEST_ITEM.findall(m.group(1))}
            self.add(
                items.get("passed", 0) + items.get("xpassed", 0),
                items.get("failed", 0) + items.get("error", 0) + items.get("errors", 0),
                items.get("skipped", 0) + items.get("xfailed", 0),
            )
            return
        m = MESON.match(line)
        if m:
            n = int(m.group(2))
            kind = m.group(1)
            if kind in ("Ok", "Expected Fail"):
                self.add(passed=n)
            elif kind == "Skipped":
                self.add(skipped=n)
            else:
                self.add(failed=n)
            return
        m = VECTORS.match(line)
        if m:
            self.add(int(m.group(1)) - int(m.group(2)), int(m.group(2)))
            return
        if FUZZ_RAN.match(line):
            self.add(passed=1)
            return
        if FUZZ_FAILED.match(line):
            self.add(passed=-1, failed=1)  # its "executions" line came first
            return
        m = EXPLICIT.match(line)
        if m:
            self.add(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def record(name, counts):
    folder = os.environ.get(ENV)
    if not folder:
        return
    os.makedirs(folder, exist_ok=True)
    safe = re.sub(r"[^\w.-]", "_", name)
    with open(os.path.join(folder, safe + ".json"), "w") as f:
        json.dump(
            {
                "name": name,
                "passed": counts.passed,
                "failed": counts.failed,
                "skipped": counts.skipped,
            },
            f,
        )


def run(name, command):
    counts = Counts()
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        print(f"{name}: cannot run {command[0]}: {exc}", file=sys.stderr)
        counts.add(failed=1)
        record(name, counts)
        return 127
    out = sys.stdout.buffer
    for raw in proc.stdout:
        out.write(raw)
        out.flush()
        counts.line(raw.decode("utf-8", "replace"))
    status = proc.wait()
    if not counts.seen:
        counts.add(*((1, 0) if status == 0 else (0, 1)))
    elif status != 0 and counts.failed == 0:
        counts.add(failed=1)  # it failed after its last summary, or without one
    record(name, counts)
    return status


def summary(make_status, suites):
    folder = os.environ.get(ENV, "")
    records = []
    if folder and os.path.isdir(folder):
        for entry in sorted(os.listdir(folder)):
            with open(os.path.join(folder, entry)) as f:
                records.append(json.load(f))
    total = Counts()
    print()
    for suite in suites:
        mine = [r for r in records if r["name"] == suite or r["name"].startswith(suite + ":")]
        if not mine:
            print(
                f"  {suite:<28} did not finish: a prerequisite or a recipe line failed, see above"
            )
            total.add(failed=1)
        for r in sorted(mine, key=lambda r: r["name"]):
            mark = "FAILED" if r["failed"] else ""
            print(
                f"  {r['name']:<28} passed {r['passed']:>6}  failed {r['failed']:>4}  "
                f"skipped {r['skipped']:>4}  {mark}".rstrip()
            )
            total.add(r["passed"], r["failed"], r["skipped"])
    if make_status != 0 and total.failed == 0:
        total.add(failed=1)
    print(f"total: {total.passed} passed, {total.failed} failed, {total.skipped} skipped")
    return 1 if total.failed or make_status else 0


def main(argv):
    if len(argv) >= 4 and argv[1] == "run" and argv[3] == "--":
        return run(argv[2], argv[4:])
    if len(argv) == 3 and argv[1] == "done":
        c = Counts()
        c.add(passed=1)
        record(argv[2], c)
        return 0
    if len(argv) >= 3 and argv[1] == "summary":
        return summary(int(argv[2]), argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
