"""The written answers a learner hands in with the portfolio: which notebook asks each, and how to write one.

A written answer is a markdown cell tagged `answer` in the learner's workspace copy of the
notebook (`make lab` makes the copies). Its first line names the question, `Answer: <id>`
(for example `Answer: denominator`); the rest of the cell is the answer. The portfolio copies
the text as written and lists every id it did not find; it never writes an answer itself.
"""

import re
from dataclasses import dataclass

TAG = "answer"
FIRST_LINE = re.compile(r"^[#*_\s>]*answer\s*[:\-—]\s*([A-Za-z0-9_\-]+)", re.IGNORECASE)


@dataclass(frozen=True)
class Prompt:
    """One written answer the portfolio asks for: its id, the notebook it belongs in, and the question."""

    id: str
    notebook: str
    question: str


PROMPTS = (
    Prompt(
        "transfer_31x6",
        "stage1_batches",
        "31 rows in batches of 6: the batch lengths and per-device counts you wrote before running, and why "
        "dropping the last row changes both the objective and the meaning of an epoch.",
    ),
    Prompt(
        "denominator",
        "stage2_update",
        "Why the denominator of the loss and the gradient must be the global valid count, not each device's own.",
    ),
    Prompt(
        "step_count",
        "stage3a_checkpoint",
        "Why a checkpoint's step count alone cannot rebuild the random key and the data order (the rebuild table "
        "under *Predict first* shows a case).",
    ),
    Prompt(
        "failures",
        "stage3a_checkpoint",
        "The deliberate failures (momentum, cursor, key reset): what each changed, and at which step it first "
        "became visible and why then.",
    ),
    Prompt(
        "batch_size_change",
        "stage3a_checkpoint",
        "Transfer: is changing the batch size on restore a continuation or a new experiment? If you would allow "
        "it, the migration contract you would write first.",
    ),
    Prompt(
        "topology",
        "stage4a_profile",
        "The device topology your numbers come from and the measurement boundary of each timing and trace.",
    ),
    Prompt(
        "next_optimisation",
        "stage4a_profile",
        "One next optimisation, grounded in your trace, stated so the next trace can refute it, with the "
        "correctness gate it must pass before anything is timed.",
    ),
    Prompt(
        "scaling",
        "stage5b_scaling",
        "What the efficiency and drills measured on one host show, and what they cannot show about a cluster.",
    ),
)


def prompts(notebook: str | None = None) -> list[Prompt]:
    """The prompts of `notebook` (every prompt when None), in order."""
    return [p for p in PROMPTS if notebook is None or p.notebook == notebook]


def answer_id(source: str) -> str | None:
    """The id a written answer's first non-empty line names (`Answer: <id>`), or None."""
    first = next((line for line in source.splitlines() if line.strip()), "")
    found = FIRST_LINE.match(first)
    return found.group(1).lower() if found else None
