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
