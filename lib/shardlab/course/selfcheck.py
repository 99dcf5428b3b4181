"""Self-check questions that close each stage notebook: one table, a folded answer each, a score and a pass mark.

Every question can be answered from what its stage printed or recorded; `evidence` names the
result (`notebook:key` in results/<notebook>.json) that shows it, and `cell` (when given) the tag of
the cell whose output answers it, inside the section whose heading starts with `section`: that is
where the folded answer sends the learner (tests/test_lesson_in_view.py follows each pointer
into the executed notebook and insists on a visible output there, and, where `seen` is given, on
output that states the answer: `seen` is matched against the text a reader sees in that cell). A
learner writes a letter per question into the `choices` dict of the notebook's `selfcheck` cell and
runs it; `score` counts the letters that match. The pass mark is the sources' own: at least 80 % correct.
"""

import functools
import math
from dataclasses import dataclass
from html import escape

from shardlab.course import answers

PASS_MARK = 0.8  # fraction of a stage's questions answered correctly to pass
LETTERS = "abcd"


@dataclass(frozen=True)
class Question:
    """One multiple-choice question: its options in order, the correct letter, why, and where the stage shows it."""

    notebook: str
    number: str
    prompt: str
    options: tuple[str, ...]
    answer: str
    why: str
    evidence: str
    cell: str = ""  # tag of the cell whose output answers the question ("" if not given)
    section: str = ""  # the start of the heading of the section that cell sits in
    shows: str = ""  # what a reader sees in that cell's output ("": named by the cell's first line of code)
    seen: str = ""  # a regular expression the visible output of that cell matches when it shows the answer


def _stage(notebook: str, *rows) -> tuple[Question, ...]:
    """`notebook`'s questions from rows of (prompt, options, answer, why, result key[, (cell tag, section)])."""
    return tuple(
        Question(
            notebook, str(i), prompt, tuple(options), answer, why, f"{notebook}:{key}", *(where[0] if where else ())
        )
        for i, (prompt, options, answer, why, key, *where) in enumerate(rows, start=1)
    )


QUESTIONS = (
    *_stage(
        "stage1_batches",
        (
            "The same sampler runs on a mesh of 3 devices and takes a batch of 7 rows. How many slots does the batch "
            "get, and how many valid rows does each device hold?",
            [
                "7 slots, [3, 2, 2]: no padding is needed",
                "9 slots, [3, 3, 1]: padded to the smallest multiple of 3, filled in order",
                "8 slots, [3, 3, 2]: padded to 8 as on four devices",
            ],
            "b",
            "The rows are padded to the smallest multiple of the device count that holds them and each device takes "
            "one block of slots in order, as the batch of 7 rows showed on four devices; with 3 devices that is 9 "
            "slots in blocks of 3, the last holding one row and two padded slots.",
            "device_counts_7_rows",
            (
                "placement",
                "Valid rows per device",
                "the line above the placement table: the slots and the valid rows per device for 7 rows and for 1 row "
                "on four devices",
                r"7 rows -> 8 slots, valid rows per device \[2, 2, 2, 1\]",
            ),
        ),
        (
            "A dataset of 17 rows in batches of 5, with a sampler that draws the next permutation lazily, as the "
            "course's does: one epoch's batch lengths, and the call whose batch is the first of the new permutation?",
            [
                "5, 5, 5, 5, the last topped up from the next epoch; the 4th call",
                "5, 5, 5, the 2 left over dropped; the 4th call",
                "5, 5, 5, 2; the 5th call draws the new order and its batch is the first of it",
            ],
            "c",
            "A batch never crosses an epoch boundary and the remainder is kept: 17 = 3 x 5 + 2 gives 5, 5, 5, 2, as "
            "23 = 3 x 7 + 2 gave the walk's 7, 7, 7, 2. A lazy sampler draws only when a call finds the order used "
            "up: the call after the epoch's 4th and last batch, the 5th.",
            "walk_keys",
            (
                "walk",
                "Walking the sampler",
                "the walk's batch sizes over one epoch and the sentence under it: the batch at which the key changed",
                r"(?s)batch 1  size 7\b.*batch 2  size 7\b.*batch 3  size 7\b.*batch 4  size 2\b.*"
                r"key changed at batch 5\b",
            ),
        ),
        (
            "What makes a padded slot 'not an observation'?",
            ["its features are zero", "its mask is 0, whatever its numbers", "its target is NaN"],
            "b",
            "Only the validity mask decides; padding may hold any values and must never be counted.",
            "placement",
            (
                "mask-by-position",
                "Valid rows per device",
                "the cell after the question \u201cis it the zeros that make it padding?\u201d, below the placement "
                "table: a padded slot and a real row of the same zeros, with their masks",
                r"padded slot holds features .* has mask 0; row \d+, a real row set to the same zeros, has mask 1\b",
            ),
        ),
        (
            "Which fields of the state does every device hold a copy of?",
            [
                "all six: the whole state is replicated",
                "weights and momentum (sharding P(), one copy per device); key, order, cursor and step stay "
                "on the host",
                "none: the devices only ever hold the batch",
            ],
            "b",
            "The update needs the weights and momentum on every device; the sampler runs on the host and only "
            "the batch it picks is placed.",
            "ownership",
            (
                "ownership",
                "Who holds each field",
                "the table of where each field of the state is held",
                r"(?s)(?=.*\| weights \| jax\.Array \| P\(\) \| 4 \|)(?=.*\| key \| \w+ \| host \|)",
            ),
        ),
        (
            "With the same seed, why does the second epoch visit the rows in a different order?",
            [
                "the saved key is split again before the next permutation is drawn",
                "NumPy's global generator moved on",
                "the cursor is added to the seed",
            ],
            "a",
            "The sampler's own key is split at each epoch boundary (the walk checks the new key against "
            "jax.random.split of the one before); nothing outside the state is random.",
            "coverage",
            (
                "walk",
                "Walking the sampler",
                "the walk's batches, each with its cursor and ids and the key where it starts and changes, and the "
                "check that the new key is jax.random.split of the key before it",
                r"(?s)(?=.*jax\.random\.split\(key after batch \d+\)\[0\] equals the key after batch \d+: True)"
                r"(?=.*nowhere but where a new epoch began)",
            ),
        ),
    ),
    *_stage(
        "stage2_update",
        (
            "The same step is lowered for a model of 32 features on a mesh of the first two devices. What does the "
            "all_reduce of the gradient numerator look like?",
            [
                "tensor<32xf32>, replica_groups [[0, 1]]: one value per feature, summed over the two devices",
                "tensor<8xf32>, replica_groups [[0, 1, 2, 3]]: the program does not depend on the mesh",
                "32 all_reduces of tensor<f32>, one per feature",
            ],
            "a",
            "Each psum of one array in the step's body becomes one all_reduce whose type is the summed value's (a "
            "scalar count and loss numerator, one gradient entry per feature) and whose replica_groups list the "
            "devices of the mesh axis, as the table of the lowered step shows for 8 features on four devices.",
            "all_reduce",
            (
                "all-reduce-table",
                "What the compiler was asked to do",
                "the table of each all_reduce's operand, type, what it sums and its replica_groups",
                r"(?s)(?=.*tensor&lt;8xf32&gt; \| [^|]*\| the gradient numerator[^|]*\| \[\[0, 1, 2, 3\]\])"
                r"(?=.*the valid count)(?=.*the loss numerator)",
            ),
        ),
        (
            "A batch of 8 rows leaves no padding: every device holds 2 valid rows. Does the average of the four "
            "local mean gradients equal the global mean gradient?",
            [
                "yes: with equal counts every row carries the same weight either way",
                "no: a mean of local means is never the global mean",
                "only if the four devices' rows have the same gradient",
            ],
            "a",
            "A mean of local means weights every device equally; the global mean weights every row equally. Equal "
            "counts always make them agree, as the mask with one valid row per device showed for the mean target; "
            "unequal counts in general do not, as the first batch's counts showed; a gradient is a mean too.",
            "local_means",
            (
                "local-means",
                "Local means, or one global mean?",
                "the line under the first batch's local means: the same sums with one valid row on each device",
                r"\[1, 0, 1, 0, 1, 0, 1, 0\], equal counts: the mean of local means and the global mean differ by "
                r"0\.0e\+00",
            ),
        ),
        (
            "Suppose a shard_map over the first batch's mask returned jax.lax.psum(m_block, 'data'), each device's "
            "(2,) block summed over the devices without jnp.sum, under out_specs=P(). What would it give?",
            [
                "7.0: psum counts every valid row",
                "[4.0, 3.0]: psum adds the four blocks entry by entry, and every device holds that (2,) sum",
                "the eight mask values side by side: out_specs=P() gathers the blocks",
            ],
            "b",
            "psum adds what each device holds, entry by entry, whatever its shape: the blocks [1, 1], [1, 1], "
            "[1, 1] and [1, 0] (valid rows per device 2, 2, 2, 1, filled in order) add to [4, 3], the valid rows "
            "among the devices' first slots and among their second. Under P() every device holds that one sum; "
            "laying the blocks side by side is out_specs=P('data')'s work, as per_device showed. The lowered step's "
            "table shows the same for the gradient: one all_reduce of a tensor<8xf32>, added entry by entry.",
            "shard_map",
            (
                "shard-map",
                "One collective, on a small example",
                "the mask's block on each device, each device's count laid side by side under out_specs=P('data'), the "
                "psum'd mean held by every device under out_specs=P(), and the refusal of an unreduced value under "
                "out_specs=P()",
                r"(?s)(?=.*the mask's block on each device: \[\[1, 1\], \[1, 1\], \[1, 1\], \[1, 0\]\])"
                r"(?=.*per_device: counts \[2\.0, 2\.0, 2\.0, 1\.0\], sums of targets \[[^]]*\], "
                r"sharding P\('data',\))"
                r"(?=.*everywhere: the mean target -?\d+\.\d+, sharding P\(\), on 4 devices)"
                r"(?=.*out_specs=P\(\), no psum, [^:\n]*this batch's mask[^:\n]*: ValueError)",
            ),
        ),
        (
            "On a mesh of 8 devices, a batch of 3 rows goes through the step. What happens on the devices that "
            "hold no valid row?",
            [
                "five devices join every psum with a zero count and zero numerators; the gradient is the 3 rows' mean",
                "none hold only padding: the sampler spreads the rows so that every device gets one",
                "five devices are left out: the psum's replica_groups list only the devices that hold rows",
            ],
            "a",
            "3 rows pad to 8 slots, one per device, filled in order: five devices hold padding only. As in the "
            "one-row batch, an empty device adds exact zeros to every psum and the one division uses the global "
            "count. The replica_groups list every device of the mesh, whatever the batch holds.",
            "singleton",
            (
                "singleton",
                "A singleton batch",
                "the lines on the one-row batch: which devices hold a zero count and a zero sum, and whether the "
                "step's gradient is finite and that row's",
                r"observed: the one-row batch \(.*\) has valid rows per device \[1, 0, 0, 0\]; in per_device, "
                r"devices \[1, 2, 3\] hold count 0 and sum 0.*\nthe step's gradient is finite",
            ),
        ),
    ),
    *_stage(
        "stage3a_checkpoint",
        (
            "A checkpoint written at step 0, before any update, is restored with the momentum reset to zeros. When "
            "does the fault first show?",
            [
                "at the next step, as in the fault table",
                "when the next epoch draws its permutation",
                "never: at step 0 the saved momentum is zeros already, so nothing was lost",
            ],
            "c",
            "A reset shows only where the value it puts back differs from the saved one. At step 0 the state's "
            "momentum is the zeros `initial` made, as the line under the first prediction says; the fault table's "
            "momentum rows part at the step after a save only because that save held momentum built by updates.",
            "faults",
            (
                "rebuild",
                "Predict first",
                "the line under the first prediction: the fields that differ from step 0, and whether step 0's "
                "momentum, as `initial` made it, is all zeros",
                r"step 0's momentum, as initial made it, is all zeros: True",
            ),
        ),
        (
            "Another run on the same 23 rows uses batches of 10 and saves after step 2. Restored with only the key "
            "reset to PRNGKey(seed), at which step do the ids first differ?",
            [
                "step 3, the first step after the restore",
                "step 4: the 3 unread ids finish the saved epoch at step 3, then the reset key draws",
                "never: the saved order is kept, so the ids stay right",
            ],
            "b",
            "The cursor stands at 20 after two batches of 10: ceil((23 - 20) / 10) = 1 batch finishes the saved "
            "epoch, and the next step draws a permutation from the wrong key, the same arithmetic as the key-reset "
            "cell's.",
            "fault_in_view",
            (
                "fault-in-view",
                "Fault injection",
                "the output of the cell that resets only the key: how many batches finish the saved epoch, then the "
                "first step whose ids differ beside the step that arithmetic predicts",
                r"(?s)batches finish the saved epoch.*observed: the first step whose ids differ is (\d+); the "
                r"arithmetic predicts \1\b",
            ),
        ),
        (
            "A checkpoint is restored with a different batch size. What should happen?",
            [
                "it is refused: a new batch size is a new experiment",
                "it continues with the new grouping",
                "the cursor is rescaled and it continues",
            ],
            "a",
            "A changed batch size groups the rows into other batches, makes another number of updates per epoch and "
            "builds another momentum history, as the text above the refusal table says: the contract holds the batch "
            "size, and the table shows the file refused with ContractMismatchError.",
            "rejections",
            (
                "rejections",
                "Refusals",
                "the table of refused cases, their errors and reasons",
                r"different configuration \(batch size\) \| ContractMismatchError",
            ),
        ),
        (
            "A save that writes straight into checkpoint.npz is killed halfway through. What does the next "
            "process find under that name?",
            [
                "no file: a name appears only once its file is whole",
                "the first half of the file: restore refuses it as truncated, and a new save under that name is "
                "refused because the name exists",
                "the previous checkpoint, untouched",
            ],
            "b",
            "Written in place, a file has its name from its first byte, as the reader halfway through found. "
            "The refusals show what follows: a truncated file is a CorruptCheckpointError, and save never writes "
            "over an existing name. Writing aside and publishing with os.link leaves either no file or a whole one.",
            "checkpoint",
            (
                "publish-demo",
                "Save: publish a complete file",
                "what a reader halfway through found when the file was written in place, and when it was written "
                "aside and then linked; then, under \u201cRefusals\u201d, the table's rows for a truncated file and "
                "an existing checkpoint path",
                r"(?s)written in place: a reader halfway through found 'the first half, '.*"
                r"written aside, then os\.link: a reader halfway through found no file",
            ),
        ),
    ),
    *_stage(
        "stage3b_resume",
        (
            "A resume restores every field but the key, which it seeds afresh. Where in the step-by-step table "
            "would the ids first differ from the uninterrupted record?",
            [
                "at the first resumed step",
                "at the first step that draws a new permutation: until then the saved order is read",
                "nowhere: the ids come from the order, not the key",
            ],
            "b",
            "The saved order and cursor still give the rest of the epoch; the key is used only when a new "
            "permutation is drawn, so a wrong key first shows at the step the page lists first among its draws.",
            "recovery",
            (
                "recovery-checks",
                "The real resume",
                "the line under the step-by-step table naming the steps that drew a new permutation",
                r"new permutations were drawn in steps \[\d+(, \d+)*\]",
            ),
        ),
        (
            "Your restore has read the file. Where are the restored weights and momentum?",
            [
                "in NumPy arrays on the host, to be placed by the first step",
                "a full copy on each of the four devices (sharding P())",
                "a quarter of the values on each device",
            ],
            "b",
            "restore places them replicated on the mesh it is given, as the saving run held them; the sampler's "
            "fields stay on the host.",
            "placement",
            (
                "restore",
                "Stage 3, part 2",
                "the two lines under the restore: each device field's sharding and devices",
                r"weights: P\(\) on \['cpu:0', 'cpu:1', 'cpu:2', 'cpu:3'\]\nmomentum: P\(\) on \['cpu:0', "
                r"'cpu:1', 'cpu:2', 'cpu:3'\]",
            ),
        ),
        (
            "A second resume uses the same files with a contract built for seed 18 instead of 17, batch size "
            "unchanged. What do the NPZ and Orbax restores do?",
            [
                "load: the seed only drew the initial weights, which the file replaces",
                "refuse with ContractMismatchError naming the seed",
                "load the weights and draw a new order from seed 18",
            ],
            "b",
            "The seed is part of the experiment the contract names, like the batch size: the key and order in the "
            "file came from it, so a run under another seed is a new experiment, and both restores check the "
            "contract before reading any array.",
            "refusal",
            (
                "refusal",
                "A resume under another seed",
                "the two refusals under the next seed, with the reason they give",
                r"NPZ: ContractMismatchError: .*a changed batch size or seed is a new experiment[^\n]*\n(.*\n)*"
                r"Orbax: (the same message|ContractMismatchError)",
            ),
        ),
        (
            "What does the Orbax restore target carry besides shapes and dtypes?",
            [
                "the mesh and sharding, so the arrays come back placed on the devices",
                "nothing else",
                "the checkpoint's contract, which is how a restore under another batch size is refused",
            ],
            "a",
            "A restore against a sharded target rebuilds the replicated placement instead of a host copy.",
            "orbax",
            (
                "orbax",
                "The same state through Orbax",
                "the target's device leaves printed above the table, and where each restored field was placed",
                r"(?s)target weights: ShapeDtypeStruct, shape \(\d+,\), dtype float32, sharding P\(\) on mesh "
                r"\{'data': 4\}.*\| weights \| 0\.0 \| True \| P\(\) on 4 devices \|",
            ),
        ),
    ),
    *_stage(
        "stage3c_orbax_lesson",
        (
            "The same 8-value weights file is restored onto a target with sharding P('data') on a mesh of two "
            "devices. How many values does each device hold?",
            ["8 values", "4 values", "2 values"],
            "b",
            "The target, not the file, decides where an array lands: P('data') cuts the 8 values over the mesh's "
            "devices, 8 / 2 = 4 each. The file's chunks of 2 are how it was written, not how it is read.",
            "restore_target",
            (
                "restore-elsewhere",
                "The target decides placement",
                "the values per device under each target",
                r"P\('data',?\) on \['cpu:0', 'cpu:1', 'cpu:2', 'cpu:3'\], values per device \[2, 2, 2, 2\]",
            ),
        ),
        (
            "On storage where renaming a folder is not one atomic step (it copies file by file), which mark of a "
            "finished checkpoint may a reader trust?",
            [
                "the final folder name alone",
                "commit_success.txt inside the folder, written once the rest is saved",
                "the newest modification time in the folder",
            ],
            "b",
            "A rename that copies file by file shows the final name before every file is there, so for such a path "
            "(gs://) Orbax's default is the class that uses a commit file, CommitFileTemporaryPath, as the last "
            "line under the trace prints; the commit file, written once the rest is saved, is there only once the "
            "rest is. This page's trace, on a local disk, shows both marks: the commit file as the last write it saw "
            "inside the temporary folder (TensorStore's array writes are not traced), then the rename.",
            "orbax_publish",
            (
                "orbax-publish",
                "How Orbax publishes a checkpoint",
                "the trace of what Orbax did, in order, and the last line under it: Orbax's default for a gs:// path",
                r"write\s+bare-orbax\.orbax-checkpoint-tmp/commit_success\.txt\n\s*"
                r"rename\s+bare-orbax\.orbax-checkpoint-tmp -> bare-orbax(?s:.*)"
                r"default for gs://\S+: CommitFileTemporaryPath",
            ),
        ),
        (
            "A loop saves asynchronously at steps 200 and 300 and is stopped after save(300) returned, before "
            "wait_until_finished(). The folder for 200 has its final name; 300's is still a temporary folder. "
            "Where does the next run resume?",
            [
                "from step 300: its save had returned",
                "from step 200: a folder still under its temporary name is not a finished checkpoint",
                "from step 0: an unfinished save spoils every checkpoint in the folder",
            ],
            "b",
            "save returns while background threads still write. A folder still under its temporary name is not "
            "finished, whatever it holds: the commit file may already be inside it (the trace under \u201cHow Orbax "
            "publishes a checkpoint\u201d writes commit_success.txt before the rename), but where Orbax renames, the "
            "final name comes last and only it marks the checkpoint finished. The finished folder beside it is "
            "untouched.",
            "async_save",
            (
                "async-save",
                "When a checkpoint counts",
                "the listings right after save returned and after wait_until_finished()",
                r"after wait_until_finished: \['async-orbax'\]",
            ),
        ),
        (
            "The losses matched the receipt with max |diff| 0. What does the lesson promise across JAX versions?",
            [
                "bit-equal floats",
                "only its tolerance (rtol 2e-5, atol 2e-6): max |diff| shows what this pair of versions gave",
                "nothing about floats",
            ],
            "b",
            "XLA may sum in another order under another version; the rule is the lesson's tolerance, and the "
            "difference is reported beside it.",
            "receipt",
            (
                "compare",
                "Beside the receipt",
                "the table beside the receipt: each quantity's rule and max |diff|",
                r"\| losses \| [^|]+ \| [^|]+ \| rtol 2e-05, atol 2e-06 \| [^|]+ \| True \|",
            ),
        ),
    ),
    *_stage(
        "stage4a_profile",
        (
            "Which comparison says whether four devices pay off for this workload?",
            [
                "compiled four-device against compiled single-device",
                "eager four-device against compiled four-device",
                "compile time against warm time",
            ],
            "a",
            "The one-device compiled update is the strong baseline; eager against compiled measures dispatch and "
            "recompiling.",
            "timing",
            (
                "timing_table",
                "1. Three equivalent updates",
                "the warm medians, then the sentence reading their ratios against the middle halves",
                r"4-device / 1-device = [\d.]+x",
            ),
        ),
        (
            "Another run traces four transitions: prepare_and_place 1.0, 1.2, 4.0 and 1.1 ms, "
            "compiled_update_and_wait 0.6, 3.0, 1.4 and 0.7 ms. What may it say about which dominates?",
            [
                "prepare_and_place dominates: its median is the larger",
                "compiled_update_and_wait dominates: its middle half reaches higher",
                "neither beyond the spread: the middle halves overlap",
            ],
            "c",
            "Middle halves 1.075–1.9 ms and 0.675–1.8 ms overlap, so the medians' 1.1x lies within the spread.",
            "trace",
            (
                "durations",
                "2. Four real transitions",
                "the sentence under the durations, reading the medians with their middle halves",
                r"(is longer beyond the spread: its middle half|Neither annotation is longer beyond the spread)",
            ),
        ),
        (
            "With no code changed, a target measured 1.4 ms by median in a first trace and 1.0 ms in a later "
            "capture, where the changed loop, traced in turn, measured 0.7 ms. Which cut may a verdict read?",
            [
                "1.4 − 0.7 = 0.7 ms: the first trace is the baseline",
                "1.0 − 0.7 = 0.3 ms: both loops of the one capture, traced in turn",
                "none: no two traces can ever be compared",
            ],
            "b",
            "Loops traced in turn in one capture share what the machine did; between captures it moved 0.4 ms, "
            "more than the cut.",
            "change",
            (
                "verdict",
                "4. The change",
                "the first of the verdicts in words, below the verdict table (folded until yours is written): the "
                "target's move between captures, beside the cut",
                r"With no code changed, the target (moved between captures|went from)",
            ),
        ),
        (
            "The target fell by more than your threshold plus the noise, but the control, which the change does "
            "not touch, drifted by more than your threshold. What is the verdict on the effect?",
            [
                "confirmed: the cut clears the threshold and the noise",
                "inconclusive: the machine moved as much as the effect looked for",
                "refuted: a control that moves refutes the change",
            ],
            "b",
            "A control drifting by more than the threshold shows the machine moved as much as the effect looked "
            "for: measure again.",
            "change",
            (
                "verdict",
                "4. The change",
                "the rule above the verdict table (inconclusive when the control moved by more than t), the table's "
                "control row beside the threshold, and the verdicts in words",
                r"verdict[^:\n]* on the effect: [^\n]+\n+[^\n]*verdict[^:\n]* on the mechanism: ",
            ),
        ),
    ),
    *_stage(
        "stage4b_beyond",
        (
            "With K = 20 transitions per dispatch instead of the page's K, how many all-reduces run per dispatch "
            "in fused_psum and in fused_stats?",
            [
                "20 and 20: one per step in both",
                "20 and 1: one inside the scan runs every step; one outside every loop runs once",
                "1 and 1: a dispatch is one program, so one all-reduce",
            ],
            "b",
            "The lowered programs hold the same all_reduce ops whatever K is: fused_psum's sits inside the scan and "
            "runs K times, fused_stats' sits outside every loop and runs once per dispatch.",
            "all_reduces",
            (
                "fused_all_reduces",
                "The fused loop",
                "the all_reduce ops inside and outside a loop, and how many run per dispatch",
                r"fused_stats: all_reduce ops 0 inside a loop, 1 outside",
            ),
        ),
        (
            "In the small plan (7 rows, batches of 3, 4 devices), step 3 draws one id. Whose gathered row counts "
            "in that step's loss?",
            [
                "every device's: each reads the one row",
                "device 0's only: it holds the first slot; devices 1 to 3 hold padding (-1), read row 0 and mask it",
                "device 3's only: the last device takes what is left",
            ],
            "b",
            "A batch is padded to a multiple of the devices and split in order, one block each (`my_block`); one id "
            "fills slot 0, device 0's block. Every device gathers a row, the padded slots row 0, but their mask is 0, "
            "so only device 0's row enters the loss.",
            "fused_timing",
            (
                "plan_small",
                "The fused loop",
                "step 3's one id in the plan's ids, then step 3's slots by device, in order, one block per device; "
                "above them, gather's source (padded slots read row 0, and their mask is 0)",
                r"step 3's slots by device: device 0: ids \[\d+\]; device 1: ids \[-1\]; device 2: ids \[-1\]; "
                r"device 3: ids \[-1\]",
            ),
        ),
        (
            "Which loss would still let a K-step dispatch reduce once for all K steps, as fused_stats does?",
            [
                "least squares with an L2 penalty λ‖w‖² on the weights",
                "logistic regression",
                "a two-layer network with a tanh layer",
            ],
            "a",
            "The penalty needs only w, which every device holds, so loss and gradient still follow at any w from "
            "the same fixed-size statistics of the data. Logistic and network gradients depend on w inside a "
            "nonlinearity of each row, so no fixed statistics reduced in advance give them.",
            "all_reduces",
            (
                "fused_stats_body",
                "The fused loop",
                "the algebra above the lines of fused_stats that reduce every step's statistics at once; section 3 "
                "says which losses allow it",
                r"one all-reduce for all K steps",
            ),
        ),
    ),
    *_stage(
        "stage5a_protocol",
        (
            "Saves fall on steps 3, 6 and 9, and step 3's manifest is published. Process 1 is SIGKILLed inside step 5, "
            "after step 4. How many steps does the relaunch run again?",
            [
                "none: the relaunch continues from step 4, the last step every controller completed",
                "one, step 4: the relaunch resumes at the newest published manifest, step 3",
                "four: a killed group starts again from step 0",
            ],
            "b",
            "A relaunch resumes at the newest published manifest, step 3, and runs again every step completed "
            "after it, as row (a) does for a kill of process 1 with step 3 the newest manifest.",
            "async_kill",
            (
                "reveal-async-kill",
                "Drill 1",
                "row (a) of the interruptions table: where the resume found its step, and the steps recomputed",
                r"\| \(a\) \| process 1 killed \(SIGKILL\) \| \d+, in `[^`]+` \| newest manifest: step 3[^|]* \| "
                r"\d+ \|",
            ),
        ),
        (
            "Three controllers: process 2 skips step 4 (it never publishes its step-4 digest) and publishes step 5's. "
            "Process 0's wait for step 4 expires and both peers' pulses move. Which process does its error name?",
            [
                "process 1: it is the first peer process 0 waits for",
                "process 2, as skipping step 4: it never reported step 4 but reported a later one",
                "process 2, as lost: a missing digest means a dead controller",
            ],
            "b",
            "Moving pulses rule out a lost peer; the one with a digest for a later step but none for this one "
            "skipped it, as process 1 at step 2 in Drill 3.",
            "skipped_batch",
            (
                "reveal-skip",
                "Drill 3",
                "the line saying when the controllers stopped and whom they named, and the error it quotes",
                r"they never reported step 2 but reported a later one",
            ),
        ),
        (
            "SIGTERM reaches process 1 during step 5, after that step's agreement (in its update); the regular "
            "saves fall on steps 3, 6 and 9. From which step does the relaunch resume?",
            [
                "step 5: the next agreement carries the flag to every controller, which saves the step it completed",
                "step 3, the last regular save",
                "step 6, the next regular save, which the group finishes before it stops",
            ],
            "a",
            "Step 5 completes; step 6's agreement carries the handler's flag, and every controller saves the step it "
            "completed, as row (c) shows for a SIGTERM in step 8's update (newest manifest: step 8).",
            "preemption",
            (
                "reveal-preempt",
                "Drill 1",
                "row (c) of the interruptions table",
                r"\| \(c\) \| SIGTERM: preempted at step 8 \| [^|]+ \| newest manifest: step 8 \| 0 \| "
                r"[^|]*no regular save",
            ),
        ),
    ),
    *_stage(
        "stage5b_scaling",
        (
            "Each device holds the same number of rows. One device's step took 4 ms; two devices' step took 8 ms. "
            "What efficiency is that?",
            [
                "1: each device did its share",
                "0.5: two devices delivered the rows per second of one",
                "2: twice the rows went through",
            ],
            "b",
            "Rows per second are R/4 on one device and 2R/8 = R/4 on two: efficiency (R/4) / (2 · R/4) = 0.5, "
            "T(1)/T(W) with the same rows per device.",
            "efficiency",
            (
                "efficiency",
                "Scaling",
                "the efficiency table's median ms, rows/s and efficiency at each W",
                r"\| W \| median ms \| rows/s \| efficiency \|",
            ),
        ),
        (
            "The same scaling table on a host with 8 usable cores instead of this one's: what is the ceiling "
            "min(C, W)/W at W = 4?",
            [
                "2/4: the bound this host printed, whatever the host",
                "4/4 = 1: each of the 4 devices could compute on a core of its own at once",
                "8/4 = 2: twice what 4 devices deliver alone",
            ],
            "b",
            "min(8, 4)/4 = 1: with a core for every device, the core count no longer caps efficiency. A ceiling "
            "only: if one device's step used several cores, it would lie lower.",
            "efficiency",
            (
                "reveal-efficiency",
                "Scaling",
                "the bound under the efficiency table, with this host's usable cores",
                r"\d+ usable cores",
            ),
        ),
        (
            "The same 23 rows on 4 devices, with a batch of 5 rows instead of 7. Which of ten steps compile?",
            [
                "steps 1 and 4, as with a batch of 7",
                "only step 1: every batch pads to 8 slots",
                "steps 1 and 5: four batches of 5 pad to 8 slots, the epoch's last, 3 rows, to 4",
            ],
            "c",
            "The update compiles once per padded shape: 5 rows pad to 8 slots, and the epoch's fifth batch, 3 rows "
            "(23 = 4 · 5 + 3), pads to 4, a new shape at step 5, like the 2 rows (4 slots) of a batch of 7 at step 4.",
            "step_times",
            (
                "rank-log",
                "Where each controller",
                "the padded batch rows per step, and the steps that compile",
                r"a new shape, so a compilation, at steps \[1, 4",
            ),
        ),
        (
            "Suppose two controllers' median compute times differed twofold, from eight samples each. "
            "When would that point at a straggler?",
            [
                "always: the medians differ",
                "when the two middle halves do not overlap, not from the medians alone",
                "never on one host",
            ],
            "b",
            "Medians of a few samples move with load; only middle halves that do not overlap point at a "
            "straggler, a lead for more steps to confirm.",
            "step_times",
            (
                "reveal-rank",
                "Where each controller",
                "the sentences on each phase's spread and on a straggler",
                r"the middle halves (do not )?overlap",
            ),
        ),
    ),
)


def questions(notebook: str) -> list[Question]:
    """The questions that close `notebook`, in order (empty for a notebook without a self-check)."""
    return [q for q in QUESTIONS if q.notebook == notebook]


def score(notebook: str, choices: dict) -> dict:
    """How many of `notebook`'s questions `choices` ({number: letter}) answers correctly, and whether it passes."""
    asked = questions(notebook)
    given = {str(k): str(v).strip().lower() for k, v in (choices or {}).items()}
    correct = [q.number for q in asked if given.get(q.number) == q.answer]
    unanswered = [q.number for q in asked if q.number not in given]
    fraction = len(correct) / len(asked) if asked else 0.0
    return {
        "notebook": notebook,
        "questions": len(asked),
        "answered": len(asked) - len(unanswered),
        "correct": len(correct),
        "unanswered": unanswered,
        "fraction": round(fraction, 4),
        "pass_mark": PASS_MARK,
        "passed": bool(asked) and not unanswered and fraction >= PASS_MARK,
    }


def where(q: Question) -> str:
    """Where the notebook shows the answer, as a reader finds it: the heading above the cell, what its output shows."""
    if not q.cell:
        return ""
    heading, first = _landmarks(q.notebook, q.cell)
    shown = q.shows or (f"the output of the code cell that begins `{first}`" if first else "the output of the cell")
    return f"Where this notebook shows it: under the heading \u201c{heading or q.section}\u201d, {shown}."


@functools.cache
def _cells(notebook: str) -> tuple:
    """(cell type, source, tags) of each cell of the course's `notebook`, read once per process (no validation)."""
    import json

    from shardlab.course import catalog

    try:
        cells = json.loads((catalog.NOTEBOOK_DIR / f"{notebook}.ipynb").read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return ()
    joined = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]
    return tuple((c["cell_type"], text, tuple(c.get("metadata", {}).get("tags", []))) for c, text in zip(cells, joined))


def _landmarks(notebook: str, tag: str) -> tuple[str, str]:
    """(the whole heading above the cell tagged `tag` in the course's `notebook`, the cell's first line of code)."""
    cells = _cells(notebook)
    index = next((i for i, (_, _, tags) in enumerate(cells) if tag in tags), None)
    if index is None:
        return "", ""
    heading = ""
    for kind, text, _ in cells[:index]:
        found = [h.lstrip("#").strip() for h in text.splitlines() if h.startswith("#")]
        if kind == "markdown" and found:
            heading = found[-1]
    lines = [line.strip() for line in cells[index][1].splitlines()]
    first = next((line for line in lines if line and not line.startswith(("#", "import ", "from "))), "")
    return heading, first


def _question_html(q: Question) -> str:
    options = "".join(f"<li>({LETTERS[i]}) {escape(text)}</li>" for i, text in enumerate(q.options))
    return (
        f"<li><p>{escape(q.prompt)}</p><ul style='list-style:none'>{options}</ul>"
        f"<details><summary>Answer</summary><p>({q.answer}) {escape(q.options[LETTERS.index(q.answer)])}. "
        f"{escape(q.why)} <i>{escape(where(q))}</i></p></details></li>"
    )


def render(notebook: str, choices: dict, prompts: bool = True) -> str:
    """The questions as HTML with folded answers, the score line, then the written answers this stage asks for
    (`prompts=False`: not repeated, for a page that lists them above its self-check)."""
    result = score(notebook, choices)
    items = "".join(_question_html(q) for q in questions(notebook))
    written = "".join(
        f"<li><code>Answer: {escape(p.id)}</code> — {escape(p.question)}</li>"
        for p in (answers.prompts(notebook) if prompts else ())
    )
    if written:
        written = (
            "<p>For your portfolio, write these in markdown cells tagged <code>answer</code>, each starting with "
            f"its first line as shown (<code>make portfolio</code> collects them):</p><ul>{written}</ul>"
        )
    return f"<ol>{items}</ol><p><b>{escape(verdict(result))}</b></p>{written}"


def _needed(result: dict) -> str:
    """The pass mark in questions: how many of this stage's must be right."""
    asked = result["questions"]
    return f" ({math.ceil(PASS_MARK * asked - 1e-9)} of {asked} right)" if asked else ""


def verdict(result: dict) -> str:
    """One line: the score against the pass mark, or what is still unanswered."""
    if not result["answered"]:
        return (
            f"Not answered yet: write your letters into `choices` (e.g. {{'1': 'a'}}) and run the cell again. "
            f"Pass mark {PASS_MARK:.0%}, rounded up to whole questions{_needed(result)}."
        )
    line = f"Score {result['correct']}/{result['questions']} ({result['fraction']:.0%}); "
    line += f"pass mark {PASS_MARK:.0%}, rounded up"
    line += f"{_needed(result)}: "
    line += "passed." if result["passed"] else "not yet passed."
    if result["unanswered"]:
        line += f" Unanswered: {', '.join(result['unanswered'])}."
    return line


def show(notebook: str, choices: dict, prompts: bool = True) -> dict:
    """Display the self-check in the notebook (HTML; plain text elsewhere) and return its score."""
    from IPython.display import HTML, display

    display(HTML(render(notebook, choices, prompts)))
    return score(notebook, choices)
