#!/usr/bin/env python3
"""List every function longer than 80 lines; fail unless each says why it stays long.

Scope: the library and its tools, not their tests. C: src/, tools/,
python/hurray/*.c and fuzz/*.c; Python: python/hurray/ (with its
subpackages) and scripts/. tests/ is left out: a test that lists cases
reads best as one list.

A function's length runs from the first line of its signature (C) or its
`def` line (Python) to its last line. One over the limit passes when the
comment right above it (C: the comment block that ends on the line before
the signature; Python: the `#` lines right above the `def` or its
decorators) contains "long:" and a reason, e.g.
`/* long: one case a block format, read top to bottom. */`.

C functions are found by a line scan that relies on clang-format's layout
(scripts/format.sh): a top-level definition starts at column 0, its `{`
ends the signature, and its body closes with a `}` alone at column 0.

Usage: scripts/long_functions.py [--all] [--limit N]. Exit status 0 when
every long function has its reason; --all lists those with one too.
"""

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "long:"
# git pathspecs: `*` matches across `/`, so these take subfolders too.
C_GLOBS = ("src/*.c", "tools/*.c", "python/hurray/*.c", "fuzz/*.c")
PY_GLOBS = ("python/hurray/*.py", "scripts/*.py")
NOT_A_FUNCTION = re.compile(r"^(typedef|struct|union|enum|extern)\b|=")


def tracked(globs):
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *globs], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return sorted(p for p in out.decode().split("\0") if p)


def c_comment_above(lines, start):
    """The comment block that ends on the line before `start`, as one string."""
    i = start - 1
    if i < 0:
        return ""
    if lines[i].rstrip().endswith("*/"):
        j = i
        while j >= 0 and "/*" not in lines[j]:
            j -= 1
        return "\n".join(lines[max(j, 0) : i + 1])
    j = i
    while j >= 0 and lines[j].lstrip().startswith("//"):
        j -= 1
    return "\n".join(lines[j + 1 : i + 1])


def c_functions(path):
    """(name, first line, length, comment above) of each top-level C function."""
    lines = (ROOT / path).read_text(errors="replace").splitlines()
    sig = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line[:1] not in ("", " ", "\t", "#", "/", "*", "}"):
            sig = i
        text = line.split("//")[0].rstrip()
        if sig is not None and text.endswith("{"):
            head = " ".join(lines[sig : i + 1])
            m = re.search(r"([A-Za-z_]\w*)\s*\(", head)
            if m and not NOT_A_FUNCTION.search(head[: m.start()]):
                end = i + 1
                while end < len(lines) and lines[end] != "}":
                    end += 1
                yield m.group(1), sig + 1, end - sig + 1, c_comment_above(lines, sig)
                i = end
            sig = None
        elif text.endswith(";") or not text:
            sig = None
        i += 1


def py_functions(path):
    """(name, first line, length, comment above) of each Python function, nested too."""
    source = (ROOT / path).read_text()
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        top = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        j = top - 1
        while j >= 0 and lines[j].lstrip().startswith("#"):
            j -= 1
        above = "\n".join(lines[j + 1 : top])
        yield node.name, node.lineno, node.end_lineno - node.lineno + 1, above


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("--all", action="store_true", help="list those with a reason too")
    args = parser.parse_args()
    found = []
    for path in tracked(C_GLOBS):
        found += [(path, *f) for f in c_functions(path)]
    for path in tracked(PY_GLOBS):
        found += [(path, *f) for f in py_functions(path)]
    missing = 0
    for path, name, line, length, above in sorted(set(found), key=lambda f: -f[3]):
        if length <= args.limit:
            continue
        ok = MARKER in above
        missing += not ok
        if args.all or not ok:
            print(f"{'ok  ' if ok else 'NO  '}{length:5} {path}:{line} {name}")
    if missing:
        print(
            f"long_functions: {missing} function(s) over {args.limit} lines without a"
            f' "{MARKER}" comment right above saying why; split them or add one',
            file=sys.stderr,
        )
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
