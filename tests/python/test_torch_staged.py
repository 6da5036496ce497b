"""Loading to a GPU through pinned staging buffers (hurray/torch/_staged.py).

The test machines have no GPU, so the planner and the file reads run with
a CPU sink: the same code as device="cuda" up to the copy itself. Every
chunk size here cuts tensors at odd places, so that a byte put one off
anywhere shows."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hurray
from hurray import _hurray
from hurray.torch import _load, _staged, load_file, save_file


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Tensors from the file (several dtypes, one larger than every chunk
    below, 0-d and empty ones), a quantized one and a sparse one."""
    path = tmp_path_factory.mktemp("staged") / "mixed.hurray"
    g = torch.Generator().manual_seed(7)
    save_file(
        {
            "big": torch.randn(300, 1001, generator=g).to(torch.bfloat16),
            "f32": torch.randn(17, 33, generator=g),
            "ids": torch.arange(5000, dtype=torch.int64),
            "mask": torch.rand(999, generator=g) > 0.5,
            "scalar": torch.tensor(3.5, dtype=torch.float64),
            "empty": torch.zeros(0, 4, dtype=torch.int16),
            "f8": torch.randn(777, generator=g).to(torch.float8_e5m2),
        },
        path,
    )
    # One more file with what is not plain bytes of the file.
    qpath = path.with_name("quantized.hurray")
    w = np.linspace(-3, 3, 64 * 96, dtype=np.float32).reshape(64, 96)
    sparse = hurray.torch.from_torch(torch.eye(40).to_sparse())
    hurray.save(qpath, {"q": hurray.quantize(w, "nf4"), "plain": hurray.from_numpy(w), "s": sparse})
    return path, qpath


def assert_same(got, want):
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        if w.layout == torch.strided:
            assert torch.equal(g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8)), (
                name
            )
        else:
            assert torch.equal(g.to_dense(), w.to_dense()), name


@pytest.mark.parametrize(
    "chunk, depth, threads",
    [(1 << 20, 3, None), (4096, 2, 1), (1000, 1, 3), (65537, 3, 2), (7, 2, 1)],
)
def test_staged_load_equals_the_cpu_load(mixed, chunk, depth, threads):
    path, _ = mixed
    got = _load(
        path, torch.device("cpu"), True, None, _staged.CpuSink(),
        chunk=chunk, depth=depth, threads=threads,
    )  # fmt: skip
    assert_same(got, load_file(path))
    # Copies, not views of the file: writable and private.
    got["big"].view(torch.uint8).fill_(0)
    assert load_file(path)["big"].view(torch.uint8).any()


def test_staged_load_of_computed_tensors(mixed):
    """Dequantized tensors are staged from memory, sparse ones go through
    .to(device), next to file bytes in the same buffers."""
    _, qpath = mixed
    want = load_file(qpath, dequantize=torch.bfloat16)
    for chunk in (1 << 20, 5000):
        got = _load(
            qpath, torch.device("cpu"), True, torch.bfloat16, _staged.CpuSink(), chunk=chunk
        )
        assert_same(got, want)


def test_staged_load_rejects_bad_options(mixed):
    path, _ = mixed
    with pytest.raises(ValueError, match="positive"):
        _load(path, torch.device("cpu"), True, None, _staged.CpuSink(), chunk=0)


def test_read_spans_checks_what_python_passes(mixed):
    path, _ = mixed
    f = _hurray._File(str(path))
    want = load_file(path)["ids"].numpy().view(np.uint8)
    out = np.zeros(100, np.uint8)
    f._read_spans(out, [("ids", 0, 8, 40, 10), ("ids", 0, 0, 10, 0)], 4)
    assert (out[10:50] == want[8:48]).all() and (out[:10] == want[:10]).all()
    with pytest.raises(hurray.NotFoundError):
        f._read_spans(out, [("nope", 0, 0, 1, 0)], 1)
    with pytest.raises(hurray.HurrayError, match="beyond"):
        f._read_spans(out, [("ids", 0, 40000 - 5, 6, 0)], 1)
    with pytest.raises(ValueError, match="beyond its 100 bytes"):
        f._read_spans(out, [("ids", 0, 0, 10, 95)], 1)
    with pytest.raises(ValueError, match="beyond"):
        f._read_spans(out, [("ids", 0, 0, 2**64 - 1, 1)], 1)
    with pytest.raises(TypeError, match="tuple"):
        f._read_spans(out, ["ids"], 1)
    with pytest.raises(OverflowError):
        f._read_spans(out, [("ids", 0, -1, 1, 0)], 1)
    with pytest.raises(TypeError):
        f._read_spans(bytes(10), [], 1)  # not writable
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f._read_spans(out, [], 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")
def test_cuda_load_without_a_gpu_says_so(mixed):
    path, _ = mixed
    with pytest.raises(hurray.UnsupportedError, match="no CUDA device"):
        load_file(path, device="cuda")
    with pytest.raises(hurray.UnsupportedError, match="no CUDA device"):
        load_file(path, device=0)  # an int is a CUDA index, as in safetensors


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU on this machine")
def test_cuda_load_equals_the_cpu_load(mixed):
    path, qpath = mixed
    got = load_file(path, device="cuda")
    assert all(t.device.type == "cuda" for t in got.values())
    assert_same({k: v.cpu() for k, v in got.items()}, load_file(path))
    got = load_file(qpath, device="cuda", dequantize=torch.bfloat16)
    assert_same({k: v.cpu() for k, v in got.items()}, load_file(qpath, dequantize=torch.bfloat16))


def test_a_tensor_that_starts_inside_its_buffer(tmp_path):
    """The staging spans read each tensor from byte 0 of its buffer: a
    tensor with a byte offset reached the GPU shifted, with no error."""
    raw = np.arange(20, dtype=np.float32).view(np.uint8)
    offset = hurray.Tensor(
        hurray.Descriptor("float32", (4, 4), byte_offset=16, buffers=[hurray.Buffer("data", 80)]),
        [raw],
    )
    path = tmp_path / "offset.hurray"
    hurray.save(path, {"offset": offset, "plain": np.arange(6, dtype=np.float32)})
    want = load_file(path)
    np.testing.assert_array_equal(want["offset"].numpy().ravel(), np.arange(4, 20))
    for chunk in (1 << 20, 12):
        got = _load(path, torch.device("cpu"), True, None, _staged.CpuSink(), chunk=chunk)
        assert_same(got, want)


def test_one_element_tensors_with_any_stride_are_staged(tmp_path):
    """torch calls a one-element tensor contiguous whatever its strides, so
    it was staged, and view(uint8) of its reshape refused the stride of 2
    (a RuntimeError from load_file(device="cuda") of a valid file)."""
    path = tmp_path / "s.hurray"
    tensors = {}
    for name, shape, strides in (("a", (1,), (2,)), ("b", (1, 1), (5, 3)), ("c", (2, 1), (1, 9))):
        d = hurray.Descriptor(
            "float32", shape, strides=strides, buffers=[hurray.Buffer("data", 64)]
        )
        values = np.arange(16, dtype=np.float32) + 1
        tensors[name] = hurray.Tensor(d, [values.tobytes()])
    hurray.save(path, tensors)
    got, want = _load(path, torch.device("cpu"), True, None, _staged.CpuSink()), load_file(path)
    assert list(got) == list(want)
    for name in want:
        assert got[name].shape == want[name].shape and torch.equal(got[name], want[name]), name
    assert float(got["a"][0]) == 1.0 and got["c"].tolist() == [[1.0], [2.0]]
