#!python
"""The `hurray` command of the Python package.

pip installs this file into the environment's scripts folder and rewrites
its first line to the interpreter that installed the package. It runs the C
program shipped inside the package (hurray/_bin/hurray) with HURRAY_PYTHON
set to that interpreter, so `hurray convert` of torch checkpoints and .npz
uses it rather than whichever python3 comes first on PATH. A HURRAY_PYTHON
already set wins. It imports nothing of the package, to start quickly.
"""

import os
import re
import signal
import sys
from importlib.util import find_spec


def main() -> None:
    # The C program has no network code: ls, info and verify of a URL run
    # in the package's Python (hurray/_remote_cli.py), with this interpreter.
    args = sys.argv[1:]
    files = _convert_files(args[1:]) if args[:1] == ["convert"] else _files(args[1:])
    url = any(re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", a) for a in files)
    if url and args[0] in ("ls", "info", "verify"):
        # -P: not the current directory first on sys.path, where a hurray/ or
        # numpy.py would run in place of the installed package.
        os.execv(sys.executable, [sys.executable, "-P", "-m", "hurray", *args])
    if url and args[0] in ("cat", "convert"):
        # The C program would say "No such file or directory" of a URL.
        print(f"hurray {args[0]}: URLs are read by ls, info and verify only", file=sys.stderr)
        sys.exit(2)
    spec = find_spec("hurray")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        program = os.path.join(folder, "_bin", "hurray")
        if os.access(program, os.X_OK):
            break
    else:
        sys.exit(
            f"hurray: {sys.executable} has no hurray package with its hurray program; "
            # Not "pip install hurray": that name on PyPI is another project.
            "reinstall it (pip install --force-reinstall . in the hurray source tree)"
        )
    if not os.environ.get("HURRAY_PYTHON"):
        os.environ["HURRAY_PYTHON"] = sys.executable
    # Python ignores SIGPIPE, and exec keeps that: the C program would then
    # write on into a closed pipe (| head) instead of ending as it should.
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.execv(program, ["hurray", *sys.argv[1:]])


# convert's options that take a value (hurray/__main__.py): a pattern such
# as --exclude 'http://*' is no URL to refuse. The others, so that a prefix
# argparse takes for one option (--excl) is told apart as argparse does.
_CONVERT_VALUES = (
    "--quantize",
    "--quantize-include",
    "--quantize-exclude",
    "--include",
    "--exclude",
    "--block-size",
    "--threads",
)
_CONVERT_FLAGS = ("--keep-scales", "--dequantize", "--no-verify", "--stats", "--json", "--quiet")


def _takes_value(option):
    """Whether argparse reads the next argument as this option's value: a
    whole name, or a prefix of exactly one, that takes one (not --x=v)."""
    if "=" in option:
        return False
    names = [n for n in _CONVERT_VALUES + _CONVERT_FLAGS if n.startswith(option)]
    return option in _CONVERT_VALUES or (len(names) == 1 and names[0] in _CONVERT_VALUES)


def _positionals(args, takes_value):
    """The arguments that are neither options nor an option's value, read
    as the C program and argparse read them ("--" ends the options)."""
    found = []
    options, value = True, False
    for a in args:
        if value:
            value = False
        elif options and a == "--":
            options = False
        elif options and a.startswith("-") and a != "-":
            value = takes_value(a)
        else:
            found.append(a)
    return found


def _convert_files(args):
    """convert's SRC and DST."""
    return _positionals(args, _takes_value)


def _files(args):
    """The FILE among ls, info, verify and cat's arguments: the first that
    is not an option (cat's --buffer takes a value). A NAME after it that
    looks like a URL is a NAME."""
    return _positionals(args, lambda a: a == "--buffer")[:1]


if __name__ == "__main__":
    main()
