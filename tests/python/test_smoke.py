import numpy as np

import hurray


def test_numpy_round_trip_through_capsule_and_file(tmp_path):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = hurray.from_numpy(a)
    assert np.shares_memory(t.numpy(), a)
    u = hurray.from_hurray(t)
    assert np.shares_memory(u.numpy(), a)
    hurray.save(tmp_path / "x.hurray", {"a": a}, {"step": 3})
    with hurray.open(tmp_path / "x.hurray") as f:
        assert f.metadata == {"step": 3}
        np.testing.assert_array_equal(f["a"].numpy(), a)


def test_stubs_cover_the_public_api():
    """Every public name has a stub, and the stubs parse: the shipped .pyi
    files are what type checkers see."""
    import ast
    from pathlib import Path

    package = Path(hurray.__file__).parent
    tree = ast.parse((package / "__init__.pyi").read_text())
    stubbed = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            stubbed.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            stubbed.add(node.target.id)
        elif isinstance(node, ast.Assign):
            stubbed.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom):
            stubbed.update(a.asname or a.name for a in node.names)
    missing = sorted(set(hurray.__all__) - stubbed)
    assert not missing, f"public names without stubs: {missing}"
    ast.parse((package / "torch" / "__init__.pyi").read_text())


def _stub_vs_runtime(stub_path, module):
    """Differences between a .pyi and the module it describes, by hand:
    __all__, top-level names, function parameters, public class members."""
    import ast
    import inspect

    tree = ast.parse(stub_path.read_text())
    problems = []
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def stubbed_members(cls):
        out = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
        out |= {
            n.target.id
            for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        }
        for base in cls.bases:  # members a stub class inherits from another stub class
            if isinstance(base, ast.Name) and base.id in classes:
                out |= stubbed_members(classes[base.id])
        return out

    def params(fn):
        a = fn.args
        return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]

    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            stub_all = set(ast.literal_eval(node.value))
            if stub_all != set(module.__all__):
                problems.append(
                    f"__all__: stub lacks {sorted(set(module.__all__) - stub_all)}, "
                    f"has extra {sorted(stub_all - set(module.__all__))}"
                )
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            runtime = getattr(module, node.name, None)
            if runtime is None:
                problems.append(f"{node.name}: in the stub, not at runtime")
            elif isinstance(node, ast.FunctionDef):
                try:
                    names = list(inspect.signature(runtime).parameters)
                except (TypeError, ValueError):
                    continue
                if any(
                    p.kind is p.VAR_KEYWORD for p in inspect.signature(runtime).parameters.values()
                ):
                    continue
                if names != params(node):
                    problems.append(f"{node.name}{tuple(names)}: stub has {tuple(params(node))}")
            else:
                stubbed = stubbed_members(node)
                own = {
                    k
                    for c in runtime.__mro__
                    if c.__module__.startswith("hurray")
                    for k in vars(c)
                    if not k.startswith("_")
                }
                missing = sorted(own - stubbed)
                if missing and stubbed:  # dataclass-like records list fields, not methods
                    problems.append(f"{node.name}: runtime members without stubs: {missing}")
                init = next((n for n in node.body if getattr(n, "name", "") == "__init__"), None)
                if init is not None and "__init__" in vars(runtime):
                    got = list(inspect.signature(runtime.__init__).parameters)
                    if got != params(init):
                        problems.append(
                            f"{node.name}.__init__{tuple(got)}: stub has {params(init)}"
                        )
    return problems


def test_stubs_match_the_runtime():
    """What mypy.stubtest would say about names and parameters, without
    needing mypy: a stub that lags the code misleads every type checker."""
    from pathlib import Path

    package = Path(hurray.__file__).parent
    assert _stub_vs_runtime(package / "__init__.pyi", hurray) == []


def test_torch_stubs_match_the_runtime():
    import pytest

    pytest.importorskip("torch")
    from pathlib import Path

    import hurray.torch.dcp as dcp

    package = Path(hurray.__file__).parent
    assert _stub_vs_runtime(package / "torch" / "dcp.pyi", dcp) == []
    assert _stub_vs_runtime(package / "torch" / "__init__.pyi", hurray.torch) == []


_NARROW_ON_DEMAND = r"""
import sys
import numpy as np
import hurray

assert "ml_dtypes" not in sys.modules, "import hurray imported ml_dtypes"
path = sys.argv[1]
x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(4, 64)
hurray.save(path, {"x": x, "q": hurray.quantize(x, "nf4")})
with hurray.open(path) as f:
    f["x"].numpy()
assert "ml_dtypes" not in sys.modules, "a float32 file imported ml_dtypes"
# Asked for by name before anything imported ml_dtypes: numpy alone does
# not know "bfloat16" yet.
y = hurray.load(path)["q"].dequantize(dtype="bfloat16")
assert y.dtype.name == "bfloat16", y.dtype
assert hurray.from_numpy(y).dtype == "bfloat16"
out = np.empty((4, 64), y.dtype)
hurray.load(path)["q"].dequantize(out=out)
np.testing.assert_array_equal(out.view(np.uint16), y.view(np.uint16))
print("ok")
"""


def test_narrow_dtypes_load_on_demand(tmp_path):
    # ml_dtypes is imported the first time a narrow dtype is needed, not by
    # `import hurray` (it cost 0.85 s of every start); a fresh interpreter is
    # the only place where it is not imported yet.
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", _NARROW_ON_DEMAND, str(tmp_path / "n.hurray")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
