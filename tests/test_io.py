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


def test_the_zip_writer_keeps_names_bytes_and_modes_and_nothing_of_the_clock(tmp_path):
    import time
    import zipfile

    from shardlab import io

    members = [("b/x.txt", b"second" * 50, 0o644), ("a.sh", b"#!/bin/sh\n", 0o755)]
    first = io.write_zip(tmp_path / "1.zip", iter(members))
    time.sleep(2.1)  # past the zip format's two-second clock: a written timestamp would now differ
    second = io.write_zip(tmp_path / "2.zip", iter(members))
    assert open(first, "rb").read() == open(second, "rb").read()
    with zipfile.ZipFile(first) as archive:
        infos = archive.infolist()
        assert [(i.filename, archive.read(i), i.external_attr >> 16) for i in infos] == members
        assert {i.compress_type for i in infos} == {zipfile.ZIP_DEFLATED}
        assert {i.date_time for i in infos} == {(2000, 1, 1, 0, 0, 0)}


def test_inside_answers_as_the_path_parts_do_for_siblings_the_root_relative_names_and_descriptors(
    tmp_path, monkeypatch
):
    import os
    from pathlib import PurePosixPath

    from shardlab.io import inside

    monkeypatch.chdir(tmp_path)
    top = str(tmp_path / "run")
    cases = [
        top,
        top + "/",
        top + "/a/b.json",
        top + "-old/a",
        top + "x",
        str(tmp_path),
        "run/a",
        "run",
        "/",
        "x/../run/a",
    ]
    for path in cases:  # the independent answer: the absolute parts of `top` begin those of `path`
        want = PurePosixPath(os.path.abspath(path)).parts[: len(PurePosixPath(top).parts)] == PurePosixPath(top).parts
        assert inside(path, top) is want, path
        assert inside(os.fsencode(path), top) is want and inside(PurePosixPath(path), top) is want
    assert inside(top + "/a", "/") and inside("/", "/") and not inside("/etc", top)
    assert not inside(3, top) and not inside(None, top)  # a descriptor, or no path at all
