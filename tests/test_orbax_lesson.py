"""The Orbax lesson's receipt: rebuilt here in NumPy from its text alone, then set beside the notebook's replay."""

import os

import numpy as np
import pytest
from conftest import executed, results

from shardlab.course import orbax_lesson as lesson

pytestmark = pytest.mark.stage3
TOL = {"rtol": 2e-5, "atol": 2e-6}  # the lesson's stated tolerance


def permutation(key, n):
    import jax

    return np.asarray(jax.random.permutation(key, n))


def numpy_replay(transitions=6):
    """The lesson's program in float32 NumPy: its data formula, split-then-permute order, lazy reshuffle, momentum."""
    import jax

    x_all = np.random.default_rng(41).normal(size=(16, 8)).astype(np.float32)
    y_all = x_all @ np.linspace(-0.3, 0.4, 8, dtype=np.float32)
    key, first = jax.random.split(jax.random.PRNGKey(17))
    order, cursor = permutation(first, 16), 0
    w, v, log = np.zeros(8, np.float32), np.zeros(8, np.float32), []
    for _ in range(transitions):
        if cursor == 16:
            key, sub = jax.random.split(key)
            order, cursor = permutation(sub, 16), 0
        ids = order[cursor : cursor + 8]
        cursor += 8
        x, y = x_all[ids], y_all[ids]
        residual = x @ w - y
        grad = 2 * x.T @ residual / 8
        log.append({"ids": ids.tolist(), "loss": float(np.mean(residual**2)), "w": w.copy(), "v": v.copy()})
        v = np.float32(0.8) * v + grad
        w = w - np.float32(0.04) * v
    return log


def test_the_receipt_follows_from_the_lesson_text():
    log = numpy_replay()
    receipt = lesson.RECEIPT
    assert [entry["ids"] for entry in log[1:4]] == receipt["next_ids"]
    np.testing.assert_allclose([entry["loss"] for entry in log[1:4]], receipt["losses"], **TOL)
    gap = float(np.max(np.abs(0.04 * 0.8 * log[1]["v"])))  # zeroed momentum changes w by lr * decay * v
    np.testing.assert_allclose(gap, receipt["momentum_gap"], **TOL)
    assert (receipt["restored_step"], receipt["restored_cursor"]) == (1, 8)
    assert sorted(log[2]["ids"] + log[3]["ids"]) == list(range(16)), "the second resumed batch opens a new epoch"


def test_what_the_receipt_leaves_out_is_named():
    rows = lesson.compare({**lesson.RECEIPT, "losses": [x * (1 + 1e-6) for x in lesson.RECEIPT["losses"]]})
    loose = {r["quantity"] for r in rows if r["rule"] != "exact"}
    assert loose == {"losses", "momentum_gap"} and loose <= set(lesson.UNSTATED)
    assert {"transitions 4 and 5", "step 1"} <= set(lesson.UNSTATED)
    assert all(r["equal"] for r in rows)
    assert {r["quantity"] for r in rows} == set(lesson.RECEIPT) - {"jax"}  # only what the receipt prints
    off = lesson.compare({**lesson.RECEIPT, "next_ids": [[0] * 8] * 3, "momentum_gap": 0.02})
    assert {r["quantity"] for r in off if not r["equal"]} == {"next_ids", "momentum_gap"}
    caught_at_once = {"first_batch_same": False, "next_epoch_same": False}  # a wrong key that shows at once
    off = lesson.compare({**lesson.RECEIPT, "wrong_key": caught_at_once})
    assert [r["quantity"] for r in off if not r["equal"]] == ["wrong_key"]


@pytest.mark.notebooks
def test_the_notebook_replay_matches_the_receipt_and_numpy(run_dir):
    found = results(run_dir, "stage3c_orbax_lesson")["receipt"]
    rows = {r["quantity"]: r for r in found["rows"]}
    assert set(rows) == set(lesson.RECEIPT) - {"jax"}
    assert all(r["equal"] for r in rows.values()), [r for r in rows.values() if not r["equal"]]
    log = numpy_replay()
    assert rows["next_ids"]["observed"] == [entry["ids"] for entry in log[1:4]]
    np.testing.assert_allclose(rows["losses"]["observed"], [entry["loss"] for entry in log[1:4]], **TOL)
    assert rows["restored_step"]["observed"] == 1 and rows["restored_cursor"]["observed"] == 8
    assert rows["devices"]["observed"] == 4 and "final_step" not in rows  # the receipt never prints one
    assert found["replicas_checked"] == 4
    assert found["delayed_key_failure"] == {"first_batch_same": True, "next_epoch_same": False}
    assert found["replay"]["ids"] == [entry["ids"] for entry in log[1:6]]
    np.testing.assert_allclose(found["replay"]["resumed_losses"], [entry["loss"] for entry in log[1:6]], **TOL)
    assert found["replay"]["first_new_permutation"] == 2  # 16 rows in eights, cursor 8: one batch left


def test_the_first_new_permutation_is_read_from_the_ids_in_either_form():
    """The count needs no cursor: a lazy and an eager sampler give the same ids, so the same answer."""
    saved = {"order": np.array([3, 1, 0, 2]), "cursor": 2}
    assert lesson.first_new_permutation(saved, [[0, 2], [2, 3], [0, 1]]) == 2  # [0, 2] is the rest of the order
    assert lesson.first_new_permutation({**saved, "cursor": 0}, [[3, 1], [0, 2], [1, 0]]) == 3
    assert lesson.first_new_permutation({**saved, "cursor": 0}, [[3, 1], [0, 2]]) is None
    assert lesson.first_new_permutation(saved, [[0, 3]]) == 1  # not the saved rows: already another order


TMP = "bare.orbax-checkpoint-tmp"
PUBLISHED = [  # a save as Orbax 0.12 traces it: everything under a temporary name, the marker last, one rename
    ("os.mkdir", [TMP]),
    ("open", [f"{TMP}/_METADATA"]),
    ("open", [f"{TMP}/commit_success.txt"]),
    ("os.rename", [TMP, "bare"]),
]


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        (PUBLISHED, {"renamed": 1, "marker_last": 1, "early": 0}),
        (PUBLISHED[:2] + PUBLISHED[3:], {"renamed": 1, "marker_last": 0, "early": 0}),  # no marker
        ([PUBLISHED[0], PUBLISHED[2], PUBLISHED[1], PUBLISHED[3]], {"renamed": 1, "marker_last": 0, "early": 0}),
        ([("os.mkdir", ["bare"]), ("open", ["bare/commit_success.txt"])], {"renamed": 0, "marker_last": 0, "early": 2}),
        ([("open", ["bare/x"]), *PUBLISHED], {"renamed": 1, "marker_last": 1, "early": 1}),  # the name used early
        (PUBLISHED[:3] + [("os.rename", [TMP, "elsewhere"])], {"renamed": 0, "marker_last": 1, "early": 0}),
    ],
)
def test_the_publish_order_is_read_from_the_trace_as_the_sentence_states_it(events, expected):
    assert lesson.publish_order(events, "bare") == expected


@pytest.mark.parametrize("final_at_return", [0, 1])
def test_the_async_save_sentence_is_chosen_by_whether_the_final_name_was_there(final_at_return):
    from shardlab.course import sentences

    _, absent, present = sentences.CHOSEN["stage3c_orbax_lesson"]["async_save_counts_after_wait"]
    said = sentences.chosen(
        "stage3c_orbax_lesson", "async_save_counts_after_wait", final_at_return=final_at_return, others_at_return=2
    )
    assert said == (present if final_at_return else absent).format(others_at_return=2), said


@pytest.mark.notebooks
def test_the_async_save_sentence_matches_the_recorded_listing(run_dir):
    found = results(run_dir, "stage3c_orbax_lesson")
    listing = found["async_save"]
    assert listing["after_wait"] == ["async-orbax"]  # the wait leaves only the final name
    final_early = "async-orbax" in listing["at_return"]  # read from the listing, not from the recorded flag
    assert listing["final_at_return"] == int(final_early)
    assert listing["others_at_return"] == len(listing["at_return"]) - int(final_early)
    assert all(n.startswith("async-orbax") for n in listing["at_return"]), listing["at_return"]
    claim = found["claims"]["async_save_counts_after_wait"]
    assert claim["holds"] is (not final_early)
    assert claim["values"] == {"final_at_return": int(final_early), "others_at_return": listing["others_at_return"]}
    shown = [o.get("text", "") for c in executed(run_dir, "stage3c_orbax_lesson").cells for o in c.get("outputs", [])]
    assert any(f"right after save returned: {listing['at_return']}" in text for text in shown)
    assert any(claim["text"] in text for text in shown)


def test_the_write_watch_notes_what_happens_inside_its_folder_and_only_while_watching(tmp_path):
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    with lesson.watch_writes(str(inside)) as events:
        os.mkdir(inside / "tmp")
        (inside / "tmp" / "a").write_text("x")
        (inside / "tmp" / "a").read_text()  # a read: not noted
        (outside / "b").write_text("x")  # outside the folder: not noted
        os.rename(inside / "tmp", inside / "final")
    (inside / "final" / "c").write_text("x")  # after the block: not noted
    expected = [("os.mkdir", ["tmp"]), ("open", [os.path.join("tmp", "a")]), ("os.rename", ["tmp", "final"])]
    assert events == expected, events
    assert lesson.trace_lines(events + [events[-1]])[-1].endswith("(2 times in a row)")
