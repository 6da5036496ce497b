"""`hurray ls|info|verify URL`: the C command has no network code, so the
launcher (python/hurray-launcher.py) runs `python -m hurray ls URL` with
the interpreter that installed the package, and this module answers with
the C command's layout. Exit status: 0 success, 1 failure, 2 usage."""

from __future__ import annotations

import sys
from typing import List

COMMANDS = ("ls", "info", "verify")
_USAGE = "usage: hurray ls|info|verify URL"


def _quant_name(d) -> str:
    """The C command's names (tools/cli_common.c)."""
    q = d.quantization
    if q is None:
        return "-"
    kind = d.to_dict()["quantization"]["kind"]
    if kind == "mx":
        return "mx" + str(d.to_dict()["quantization"].get("element", "")).replace("_", "-")
    return kind.replace("_", "-")


def _layout_name(d) -> str:
    return type(d.layout).__name__.lower()


def _ls(f, out) -> None:
    print(
        f"{'NAME':<40} {'DTYPE':<14} {'SHAPE':<20} {'LAYOUT':<12} {'QUANTIZATION':<20} "
        f"{'BYTES':>12}  STATISTICS",
        file=out,
    )
    for name in f.keys():
        d = f.descriptor(name)
        shape = "[" + ", ".join(str(n) for n in d.shape) + "]"
        size = sum(b.byte_size for b in d.buffers)
        print(
            f"{name:<40} {d.dtype:<14} {shape:<20} {_layout_name(d):<12} "
            f"{_quant_name(d):<20} {size:>12}",
            file=out,
        )


def _info(f, url, out) -> None:
    print(f"file: {url}", file=out)
    print(f"tensors: {len(f)}", file=out)
    metadata = f.metadata
    print(f"metadata: {len(metadata)} entries", file=out)
    for key, value in metadata.items():
        print(
            f"  {key} = {value!r}" if not isinstance(value, str) else f"  {key} = {value}", file=out
        )
    for name in f.keys():
        d = f.descriptor(name)
        shape = "[" + ", ".join(str(n) for n in d.shape) + "]"
        size = sum(b.byte_size for b in d.buffers)
        print(
            f"\ntensor {name}: {d.dtype} {shape}, {_layout_name(d)}, quantization "
            f"{_quant_name(d)}, {size} bytes in {len(d.buffers)} buffers",
            file=out,
        )
        print(d.to_json(), file=out)


def main(argv: List[str]) -> int:
    if len(argv) != 2 or argv[0] not in COMMANDS:
        print(_USAGE, file=sys.stderr)
        return 2
    command, url = argv
    from . import open as hurray_open
    from ._hurray import HurrayError

    try:
        with hurray_open(url) as f:
            if command == "ls":
                _ls(f, sys.stdout)
            elif command == "info":
                _info(f, url, sys.stdout)
            else:
                f.verify()
                buffers = sum(len(f.descriptor(n).buffers) for n in f.keys())
                print(f"{url}: OK, {len(f)} tensors, {buffers} buffers verified")
    except (HurrayError, OSError) as exc:
        text = " ".join((str(exc).strip() or type(exc).__name__).split())
        print(f"hurray {command}: {url}: {text}", file=sys.stderr)
        return 1
    return 0
