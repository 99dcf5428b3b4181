"""stage 3a's `watched`: the file operations of one folder, in order, with temporary names numbered."""

import os

from shardlab.course.watch import watched


def test_a_write_aside_then_link_is_noted_in_order_and_nothing_outside_the_folder(tmp_path):
    outside = tmp_path / "elsewhere.txt"
    sibling = tmp_path / "stage3-other.txt"  # beside the folder, its name starting with the folder's
    folder = tmp_path / "stage3"
    folder.mkdir()
    final = folder / "checkpoint.npz"
    with watched(folder, published=final) as seen:
        with open(folder / ".tmp123", "w") as handle:
            handle.write("bytes")
            handle.flush()
            os.fsync(handle.fileno())
        os.link(folder / ".tmp123", final)
        os.remove(folder / ".tmp123")
        outside.write_text("not watched")
        sibling.write_text("not watched")
    assert [line.split()[0] for line in seen["operations"]] == ["open", "os.fsync", "os.link", "os.remove"]
    assert "<temporary 1> (5 bytes)" in seen["operations"][1]
    assert seen["operations"][2].endswith("<temporary 1> -> checkpoint.npz")
    assert seen["left"] == []
    with watched(folder) as after:  # outside a block nothing is noted; here a file left behind is named
        (folder / "stray").write_text("x")
    assert after["left"] == ["stray"] and len(after["operations"]) == 1
