#!/usr/bin/env python3
"""The exported ABI of libhurray.so is exactly what the headers promise.

Three lists must be the same set:
  - the functions include/hurray/*.h declare with HURRAY_API;
  - the `global:` names of src/libhurray.map, the linker version script;
  - the symbols the shared library defines and exports (nm -D --defined-only).
and every name has the hurray_ prefix. Run by `meson test` (the exports
test): scripts/check_exports.py build/libhurray.so

scripts/check_exports.py --update-map rewrites src/libhurray.map from the
headers (after adding or removing a public function; review the diff).
"""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def header_names():
    names = set()
    for header in sorted((REPO / "include" / "hurray").glob("*.h")):
        text = header.read_text()
        names |= set(re.findall(r"^HURRAY_API\s+[^;(]*?\b(\w+)\s*\(", text, re.M))
    return names


HEADER_ORDER = ["common", "dtype", "descriptor", "buffer", "io", "quant", "convert"]


def update_map():
    path = REPO / "src" / "libhurray.map"
    text = path.read_text()
    head = text[: text.index("{")]
    headers = sorted(
        (REPO / "include" / "hurray").glob("*.h"),
        key=lambda h: (
            HEADER_ORDER.index(h.stem) if h.stem in HEADER_ORDER else len(HEADER_ORDER),
            h.stem,
        ),
    )
    lines = ["{", "  global:"]
    for header in headers:
        names = re.findall(r"^HURRAY_API\s+[^;(]*?\b(\w+)\s*\(", header.read_text(), re.M)
        if names:
            lines.append(f"    /* hurray/{header.name} */")
            lines += [f"    {n};" for n in names]
    lines += ["  local:", "    *;", "};", ""]
    path.write_text(head + "\n".join(lines))


def map_names():
    text = re.sub(r"/\*.*?\*/", "", (REPO / "src" / "libhurray.map").read_text(), flags=re.S)
    match = re.search(r"global\s*:(.*?)local\s*:", text, re.S)
    if match is None:
        sys.exit("src/libhurray.map: no global: ... local: section")
    return {n.strip() for n in match.group(1).split(";") if n.strip()}


def exported_names(lib):
    out = subprocess.run(
        ["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True
    ).stdout
    # Version nodes (an absolute symbol per node) are not functions.
    return {
        line.split()[-1].split("@")[0]
        for line in out.splitlines()
        if line.strip() and line.split()[1] != "A"
    }


def main():
    if sys.argv[1:] == ["--update-map"]:
        update_map()
        return
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} path/to/libhurray.so")
    lists = {
        "headers (HURRAY_API)": header_names(),
        "src/libhurray.map": map_names(),
        Path(sys.argv[1]).name: exported_names(sys.argv[1]),
    }
    everything = set().union(*lists.values())
    bad = False
    for what, names in lists.items():
        missing = sorted(everything - names)
        if missing:
            bad = True
            print(f"missing from {what}: {', '.join(missing)}", file=sys.stderr)
    unprefixed = sorted(n for n in everything if not n.startswith("hurray_"))
    if unprefixed:
        bad = True
        print(f"without the hurray_ prefix: {', '.join(unprefixed)}", file=sys.stderr)
    if bad:
        sys.exit(1)
    print(
        f"exports: {len(everything)} symbols, the same in the headers, the version script "
        f"and {Path(sys.argv[1]).name}, all hurray_*"
    )


if __name__ == "__main__":
    main()
