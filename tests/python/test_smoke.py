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
