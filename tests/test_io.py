"""The shared helpers of shardlab.io: the JSON-plain converter, the atomic writer, the NPZ reader."""


def test_the_shared_json_converter_and_writer_against_hand_written_values(tmp_path):
    import json

    import numpy as np

    from shardlab import io

    value = {1: np.float32(0.5), "a": (np.arange(3, dtype=np.int64), [np.bool_(True)]), "f": 1 / 3}
    assert io.plain(value) == {"1": 0.5, "a": [[0, 1, 2], [True]], "f": 1 / 3}
    assert io.plain(value, digits=3)["f"] == 0.333
    path = io.write_json(tmp_path / "x.json", value)
    assert json.loads(open(path).read())["a"] == [[0, 1, 2], [True]] and os_listing(tmp_path) == ["x.json"]
    np.savez(tmp_path / "m.npz", w=np.ones(2, np.float32), k=np.array([1, 2], np.uint32))
    found = io.read_npz(tmp_path / "m.npz")
    assert sorted(found) == ["k", "w"] and found["k"].dtype == np.uint32 and found["w"].tolist() == [1.0, 1.0]


def os_listing(folder):
    import os

    return sorted(os.listdir(folder))
