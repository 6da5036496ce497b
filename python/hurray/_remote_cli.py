"""`hurray ls|info|verify URL`: the C command has no network code, so the
launcher (python/hurray-launcher.py) runs `python -P -m hurray ls URL` with
the interpreter that installed the package, and this module answers with
the C command's layout. Exit status: 0 success, 1 failure, 2 usage."""

from __future__ import annotations

import errno
import math
import os
import sys
from typing import List

from ._shown import ESCAPE_BACKSLASH, ESCAPE_JSON, counted
from ._shown import shown as _escaped

COMMANDS = ("ls", "info", "verify")
_USAGE = "usage: hurray ls URL | info [--json] URL [NAME] | verify URL"


def _quant_name(d) -> str:
    """The C command's names (tools/cli_common.c)."""
    q = d.to_dict().get("quantization")
    if q is None:
        return "-"
    kind = q["kind"]
    if kind == "mx":
        return "mx" + str(q.get("element", "")).replace("_", "-")
    if kind == "block_coded":
        return str(q.get("format", "block-coded"))
    return kind.replace("_", "-")


def _layout_name(d) -> str:
    name = type(d.layout).__name__.lower()
    if name == "sparse":
        return "sparse-" + d.layout.format
    return name


def _g(x: float, form: str = "%g") -> str:
    """C's printf of a double: glibc writes a NaN's sign ("-nan")."""
    if x != x:
        return "-nan" if math.copysign(1.0, x) < 0 else "nan"
    return form % x


def _ljust(text: str, width: int) -> str:
    """hurray_cli_put_padded: an escaped name padded by code points."""
    return text + " " * max(0, width - len(text))


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
        line = (
            f"{_ljust(_escaped(name), 40)} {d.dtype:<14} {shape:<20} {_layout_name(d):<12} "
            f"{_quant_name(d):<20} {size:>12}"
        )
        s = d.statistics
        if s is not None:
            parts = []
            if s.min is not None:
                parts.append(f"min={_g(s.min)}")
            if s.max is not None:
                parts.append(f"max={_g(s.max)}")
            if s.nan_count is not None:
                parts.append(f"nan={s.nan_count}")
            if s.zero_count is not None:
                parts.append(f"zeros={s.zero_count}")
            if parts:
                line += "  " + " ".join(parts)
        print(line, file=out)


def _metadata_text(value, json: bool) -> str:
    """tools/cli_info.c's print_metadata_value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if json and (value != value or value - value != 0):
            return '{"float": "' + ("nan" if value != value else _g(value)) + '"}'
        text = _g(value, "%.17g")
        # as C: a float that prints as an integer reads apart from an int
        return text + ".0" if json and "." not in text and "e" not in text else text
    if isinstance(value, (bytes, bytearray)):
        if json:
            return '{"bytes_hex": "' + bytes(value).hex() + '"}'
        return f"<{len(value)} bytes> " + bytes(value).hex()
    if json:
        return '"' + _escaped(str(value), ESCAPE_JSON | ESCAPE_BACKSLASH) + '"'
    return _escaped(str(value))


def _json_text(text: str) -> str:
    return "\n".join(_escaped(line, ESCAPE_JSON) for line in text.rstrip("\n").split("\n"))


def _info(f, url, out, only=None, json=False) -> None:
    names = [n for n in f.keys() if only is None or n == only]
    metadata = f.metadata
    if json:
        out.write('{\n"metadata": {')
        for i, (key, value) in enumerate(metadata.items()):
            key_text = _escaped(key, ESCAPE_JSON | ESCAPE_BACKSLASH)
            out.write(("," if i else "") + f'\n  "{key_text}": ' + _metadata_text(value, True))
        out.write(("\n" if metadata else "") + '},\n"tensors": {')
        for i, name in enumerate(names):
            name_text = _escaped(name, ESCAPE_JSON | ESCAPE_BACKSLASH)
            out.write(("," if i else "") + f'\n"{name_text}": ')
            out.write(_json_text(f.descriptor(name).to_json()))
        out.write("\n}\n}\n")
        return
    print(f"file: {_escaped(url)}", file=out)
    print(f"tensors: {len(f)}", file=out)
    print(f"metadata: {len(metadata)} entries", file=out)
    for key, value in metadata.items():
        print(f"  {_escaped(key)} = {_metadata_text(value, False)}", file=out)
    for name in names:
        d = f.descriptor(name)
        shape = "[" + ", ".join(str(n) for n in d.shape) + "]"
        size = sum(b.byte_size for b in d.buffers)
        print(
            f"\ntensor {_escaped(name)}: {d.dtype} {shape}, {_layout_name(d)}, quantization "
            f"{_quant_name(d)}, {size} bytes in {len(d.buffers)} buffers",
            file=out,
        )
        print(_json_text(d.to_json()), file=out)


def _one_line(exc: BaseException, url: str) -> str:
    text = str(exc)
    if isinstance(exc, OSError) and exc.errno is not None and isinstance(exc.strerror, str):
        text = exc.strerror  # without OSError's "[Errno N]" and quoted file name
    text = " ".join((text.strip() or type(exc).__name__).split())
    # The remote errors name the URL already, and C's exceptions start with
    # their status name, which the C command leaves out: the line reads as
    # the C command's would, "hurray: WHERE: what went wrong".
    if text.startswith(url + ": "):
        text = text[len(url) + 2 :]
    status = getattr(exc, "status_name", None)
    if isinstance(status, str) and text.startswith(status + ": "):
        text = text[len(status) + 2 :]
    return _escaped(text, 0)


def _usage_error(message: str) -> int:
    """tools/hurray.c's usage_error."""
    print(
        f"hurray: {_escaped(message, 0)}\nTry 'hurray --help' for more information.",
        file=sys.stderr,
    )
    return 2


def _help() -> int:
    """The C program's own help, where the package has it (one text)."""
    program = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "hurray")
    if os.access(program, os.X_OK):
        if sys.stdout is not None:
            sys.stdout.flush()
        os.execv(program, ["hurray", "--help"])
    if sys.stdout is None:  # closed: print() would drop the text and say nothing
        print(f"hurray: writing to stdout failed: {os.strerror(errno.EBADF)}", file=sys.stderr)
        return 1
    print(_USAGE)
    return 0


def _parse(command: str, args: List[str]):
    """(--json given, the FILE and NAME) as tools/hurray.c's main reads them:
    options anywhere before "--", which makes the rest FILE or NAME; or the
    exit status, once a usage error or the help is printed."""
    if command not in COMMANDS:
        return _usage_error(f"unknown command '{command}'")
    as_json, options, positional = False, True, []
    for a in args:
        if not options or not a.startswith("-") or a == "-":
            if len(positional) == 3:
                return _usage_error(f"too many arguments starting at '{a}'")
            positional.append(a)
        elif a == "--":
            options = False
        elif a in ("-h", "--help"):
            return _help()
        elif a == "--json" and command == "info":
            as_json = True
        else:
            return _usage_error(
                f"unknown option '{a}' (put -- before a FILE or NAME that starts with -)"
            )
    if command != "info" and len(positional) != 1:
        return _usage_error(f"{command} takes exactly one FILE")
    if command == "info" and not 1 <= len(positional) <= 2:
        return _usage_error("info takes FILE [NAME]")
    return as_json, positional


def main(argv: List[str]) -> int:
    command, args = (argv[0], list(argv[1:])) if argv else ("", [])
    parsed = _parse(command, args)
    if isinstance(parsed, int):
        return parsed
    as_json, args = parsed
    if sys.stdout is None:  # started with stdout closed (>&-)
        print("hurray: writing to stdout failed: it is closed", file=sys.stderr)
        return 1
    url, only = args[0], (args[1] if len(args) > 1 else None)
    from . import open as hurray_open
    from ._hurray import HurrayError
    from ._remote import shown_url

    shown = shown_url(url)

    try:
        with hurray_open(url) as f:
            if only is not None and only not in f.keys():
                print(
                    f'hurray: {_escaped(shown)}: no tensor "{_escaped(only, 0)}" in the file',
                    file=sys.stderr,
                )
                return 1
            if command == "ls":
                _ls(f, sys.stdout)
            elif command == "info":
                _info(f, shown, sys.stdout, only, as_json)
            else:
                f.verify()
                buffers = sum(len(f.descriptor(n).buffers) for n in f.keys())
                print(
                    f"{_escaped(shown)}: OK, {counted(len(f), 'tensor')}, {counted(buffers, 'buffer')} verified"
                )
            sys.stdout.flush()  # a closed pipe shows here, inside the try
    except BrokenPipeError:
        # The reader went away (| head): quietly, as SIGPIPE ends the C
        # command; stdout goes to /dev/null so that the exit flush is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (HurrayError, OSError) as exc:
        print(f"hurray: {_escaped(shown)}: {_one_line(exc, shown)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hurray: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - an fsspec back end's own error type, or a bug
        print(
            f"hurray: {_escaped(shown)}: {type(exc).__name__}: {_one_line(exc, shown)}",
            file=sys.stderr,
        )
        return 1
    return 0
