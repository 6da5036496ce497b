"""python -m hurray convert SRC DST [options]

The Python half of the `hurray` command: the C program (tools/hurray.c) runs
this module with HURRAY_PYTHON (or the interpreter it was built for) for
`hurray convert ...`. Exit status: 0 on
success, 1 when the conversion fails (one line on stderr), 2 on a usage
error."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from typing import List, Optional

EXIT_FAILURE = 1
EXIT_USAGE = 2

_DESCRIPTION = """\
Convert a checkpoint between formats, optionally quantizing on the way.
The formats follow the file names.

sources: .safetensors, *.safetensors.index.json (or a folder holding one:
         a sharded checkpoint), .gguf (every type but Q8_1 and Q1_0, all
         lossless; the K-quants, IQ, TQ and the rest kept as their blocks),
         .npz, .npy,
         .pt/.pth/.bin (torch state dicts, loaded with weights_only=True),
         .hurray; a model folder with config.json whose quantization_config
         is GPTQ, AWQ (GEMM), compressed-tensors (pack-quantized, FP8,
         NVFP4), FP8 (DeepSeek, ModelOpt), NVFP4 (ModelOpt), bitsandbytes
         4-bit or MXFP4 (gpt-oss): each quantized linear becomes one tensor
         <prefix>.weight
targets: .hurray, .safetensors, .gguf (dense F32/F16/BF16/F64/I8-I64,
         Q8_0/Q4_0 for tensors that are exactly those, and GGUF blocks kept
         from a .gguf source written back unchanged), .npz, .npy (one
         tensor), .pt/.pth/.bin (torch state dict), a folder (DIR/ or an
         existing folder: model.safetensors or the source's shards, and
         config.json)
"""

_EPILOG = """\
what --quantize picks:
  --quantize SCHEME picks, by default, every unquantized float16/bfloat16/
  float32/float64 tensor of rank 2 whose name ends with "weight" and contains
  none of: embed, embd, wte, wpe, norm, ln_, .ln, lm_head, router, gate_inp
  (nor is "output.weight" or ends with ".gate.weight"). --quantize-include
  adds names, --quantize-exclude removes them (exclude wins). Patterns are
  shell globs (fnmatch, case-sensitive), and every option may be repeated.

metadata:
  safetensors __metadata__ is kept as hurray keys "safetensors.<key>", GGUF
  key-value pairs as "gguf.<key>" with their GGUF types; both are restored
  when writing that format again.

exports of quantized tensors:
  .safetensors/.npz/.npy/.pt get the values dequantized to the tensor's
  dtype before quantization (float32 if unknown); with --keep-scales a
  .safetensors file gets <name> (codes), <name>.scales and <name>.zero_points,
  and the descriptor in __metadata__ as hurray.<name>.quantization.
  A .hurray file made from a quantized model folder gives the folder's own
  tensors back, byte for byte (and config.json into a folder target);
  --dequantize writes float32 weights instead.

examples:
  hurray convert model.safetensors model.hurray
  hurray convert model.safetensors model-q4.hurray --quantize q4_0
  hurray convert ckpt/ model.hurray --quantize nf4 --quantize-exclude '*.mlp.*'
  hurray convert model.gguf model.hurray && hurray convert model.hurray back.gguf
  hurray convert model.hurray model.safetensors --keep-scales
  hurray convert Llama-GPTQ/ llama.hurray && hurray convert llama.hurray back/

exit status: 0 on success, 1 if the conversion fails, 2 on a usage error.
See docs/impl/convert.md.
"""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"must be from 1 to 2**64 - 1: {value}")
    return value


def _threads(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= 65535:  # the C kernels' limit
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535: {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse, except that a help or usage text it cannot write is an
    error: argparse drops the OSError, and `--help >/dev/full` exited 0."""

    def _print_message(self, message, file=None):
        if message:
            if file is None:
                # The stream argparse chose is closed (None): help goes to
                # stdout, a usage error to stderr, which cannot be told.
                if sys.stdout is None:
                    raise OSError(errno.EBADF, os.strerror(errno.EBADF))
                return  # stderr, closed: the exit status still says it
            file.write(message)
            file.flush()


# long: the CLI's argument table, one subcommand after another, kept in one place.
def _parser() -> argparse.ArgumentParser:
    from ._quant import QUANT_SCHEMES

    parser = _Parser(
        prog="hurray",
        description="hurray: tensors as one descriptor plus N buffers. "
        "(ls, info, verify and cat are in the C 'hurray' command.)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    c = sub.add_parser(
        "convert",
        help="convert checkpoints to and from hurray",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("src", metavar="SRC", help="the checkpoint to read")
    c.add_argument("dst", metavar="DST", help="the file to write (replaced atomically)")
    q = c.add_argument_group("quantization")
    q.add_argument(
        "--quantize",
        metavar="SCHEME",
        choices=QUANT_SCHEMES,
        help="quantize the selected tensors: " + ", ".join(QUANT_SCHEMES),
    )
    q.add_argument(
        "--quantize-include",
        metavar="PATTERN",
        action="append",
        default=[],
        help="also quantize tensors whose name matches PATTERN",
    )
    q.add_argument(
        "--quantize-exclude",
        metavar="PATTERN",
        action="append",
        default=[],
        help="never quantize tensors whose name matches PATTERN (wins over --quantize-include)",
    )
    q.add_argument(
        "--block-size",
        metavar="N",
        type=_positive,
        help="block size for block_affine (default 32) and nf4 (default 64)",
    )
    q.add_argument(
        "--threads",
        metavar="N",
        type=_threads,
        default=os.cpu_count() or 1,
        help="threads for the quantization kernels (default: all CPUs; 0 or 1: "
        "one; the bytes are the same for any count)",
    )
    s = c.add_argument_group("selection and output")
    s.add_argument(
        "--include",
        metavar="PATTERN",
        action="append",
        default=[],
        help="convert only tensors whose name matches PATTERN",
    )
    s.add_argument(
        "--exclude",
        metavar="PATTERN",
        action="append",
        default=[],
        help="leave out tensors whose name matches PATTERN",
    )
    s.add_argument(
        "--keep-scales",
        action="store_true",
        help="a .safetensors target keeps quantized tensors as codes + scales "
        "(+ zero points) instead of dequantized values",
    )
    s.add_argument(
        "--dequantize",
        action="store_true",
        help="write quantized tensors as float values (a quantized model folder "
        "converted back gives its own tensors without it)",
    )
    s.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="do not check a .hurray source against its checksums before "
        "converting it (checked by default)",
    )
    s.add_argument(
        "--stats",
        action="store_true",
        help="store min/max/NaN/zero counts in every descriptor (.hurray targets)",
    )
    s.add_argument("--json", action="store_true", help="print the report as JSON")
    s.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing: no progress bar, no report"
    )
    parser.convert_parser = c
    return parser


def _terminate(signum, frame):
    # SIGTERM (and SIGHUP) unwind like Ctrl-C, so the converter removes its
    # temporary file instead of the process dying with it in place.
    raise KeyboardInterrupt(signum)


def _release_held_signals() -> None:
    # The C program blocks these before it hands a conversion over
    # (tools/hurray.c), so that one sent while the packages load is raised
    # here, inside the try that reports it.
    if hasattr(signal, "pthread_sigmask"):
        held = {signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM)}
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("ls", "info", "verify"):  # URLs, from the launcher
        from ._remote_cli import main as remote_main

        return remote_main(argv)
    if "--" in argv:
        # Python before 3.13 drops a "--" that is itself an operand (the file
        # named "--" after the separator) and hands convert an empty list:
        # "./--" names the same file.
        at = argv.index("--") + 1
        argv = argv[:at] + ["./--" if arg == "--" else arg for arg in argv[at:]]
    parser = _parser()
    # exits 2 on a usage error, 0 for --help; an unknown option is reported
    # by convert's own parser ("usage: hurray convert ..."), not the top one
    try:
        args, extra = parser.parse_known_args(argv)
    except OSError as failure:  # the help or usage text (_Parser)
        if isinstance(failure, BrokenPipeError):
            return _reader_went_away()
        print(f"hurray: writing to stdout failed: {failure.strerror}", file=sys.stderr)
        return EXIT_FAILURE
    if extra:
        parser.convert_parser.error("unrecognized arguments: " + " ".join(extra))
    from .convert import ConversionError, UsageError, convert

    for signum in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if signum is not None and signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _terminate)
    try:
        _release_held_signals()
        convert(
            args.src,
            args.dst,
            quantize=args.quantize,
            quantize_include=args.quantize_include,
            quantize_exclude=args.quantize_exclude,
            include=args.include,
            exclude=args.exclude,
            keep_scales=args.keep_scales,
            stats=args.stats,
            quiet=args.quiet,
            threads=args.threads,
            block_size=args.block_size,
            output="json" if args.json else "table",
            verify=args.verify,
            dequantize=args.dequantize,
        )
    except UsageError as exc:
        print(f"hurray convert: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError as exc:
        if isinstance(exc, ConversionError):  # a failure of the conversion, errno EPIPE
            print(f"hurray convert: {_one_line(exc)}", file=sys.stderr)
            return EXIT_FAILURE
        return _reader_went_away()  # of the report, after the target was written
    except (ConversionError, OSError) as exc:
        print(f"hurray convert: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt as exc:
        signum = exc.args[0] if exc.args and isinstance(exc.args[0], int) else signal.SIGINT
        print("hurray convert: interrupted", file=sys.stderr)
        return 128 + int(signum)
    except MemoryError:
        print("hurray convert: out of memory", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # noqa: BLE001 - a bug, or an input path not yet mapped to an error
        print(
            f"hurray convert: internal error: {type(exc).__name__}: {_one_line(exc)} "
            "(please report it)",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return 0


def _reader_went_away() -> int:
    """stdout's reader went away (| head): quietly, as SIGPIPE ends the C
    command; stdout goes to /dev/null so that the exit flush is quiet."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE


def _one_line(exc: BaseException) -> str:
    # Messages quote paths and names from files: escaped as the C command
    # escapes them (idempotent: an escaped name passes unchanged).
    from ._shown import shown

    text = str(exc).strip() or type(exc).__name__
    return " ".join(shown(text, 0).split())


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # e.g. `| head`
        sys.exit(EXIT_FAILURE)
