"""What a person sees of a result: a short, rounded line or a small table (machines read results files)."""

import html
import json
import math

SIGNIFICANT = 4  # digits kept when a float is shown
MAX_ITEMS = 8  # list items shown before "... (N in all)"
MAX_CHARS = 160  # one line, never cut mid-number


def number(value) -> str:
    """A float rounded to SIGNIFICANT digits ('0.0785', '1.2e-07', '421.5'); ints and others as they are."""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if value == 0 or not math.isfinite(value):
        return str(value)
    return f"{value:.{SIGNIFICANT}g}"


def brief(value, depth: int = 0) -> str:
    """A compact, rounded rendering of a JSON-like value; long lists and deep nesting are elided by count."""
    if isinstance(value, dict):
        if depth >= 2:
            return f"{{{len(value)} keys}}"
        items = [f"{k}: {brief(v, depth + 1)}" for k, v in value.items()]
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (list, tuple)):
        if depth >= 2 and len(value) > 3:
            return f"[{len(value)} items]"
        shown = [brief(v, depth + 1) for v in value[:MAX_ITEMS]]
        more = f", ... ({len(value)} in all)" if len(value) > MAX_ITEMS else ""
        return "[" + ", ".join(shown) + more + "]"
    if isinstance(value, str) and len(value) > 60:
        return repr(value[:57] + "...")
    return number(value)


def line(name: str, value) -> str:
    """`name: brief(value)`, shortened at an item boundary to one readable line."""
    text = f"{name}: {brief(value)}"
    if len(text) <= MAX_CHARS:
        return text
    kind = (
        f"{len(value)} keys" if isinstance(value, dict) else f"{len(value)} items" if hasattr(value, "__len__") else ""
    )
    cut = text.rfind(", ", 0, MAX_CHARS - 20)
    return (text[:cut] if cut > 0 else text[: MAX_CHARS - 20]) + f", ... ({kind})"


def json_excerpt(value: dict, keep: int = 2) -> str:
    """A JSON object as a file holds it (sorted keys), one line per key: a nested object of more than `keep` + 1
    entries keeps its first `keep` and says how many more; a long string (a digest) keeps its first 12 characters."""

    def trim(v):
        if isinstance(v, dict):
            items = list(v.items())
            shown = items if len(items) <= keep + 1 else items[:keep]
            return {k: trim(x) for k, x in shown} | ({"…": f"{len(items) - keep} more"} if shown != items else {})
        return v[:12] + "…" if isinstance(v, str) and len(v) > 16 else v

    lines = [f" {json.dumps(k)}: {json.dumps(trim(v), ensure_ascii=False)}" for k, v in sorted(value.items())]
    return "{\n" + ",\n".join(lines) + "\n}"


def cell(value) -> str:
    """One table cell: text in full (a rendered table wraps it at spaces), other values as `brief` shows them; `<`,
    `>` and `&` escaped, so a type such as `tensor<f32>` or `<U64` reads as written, not as a tag the page drops."""
    text = value if isinstance(value, str) else brief(value)
    parts = " ".join(text.split()).split("`")  # a `code` span shows its text as written: left as it is
    return "`".join(p if i % 2 else html.escape(p, quote=False) for i, p in enumerate(parts)).replace("|", "\\|")


def table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A Markdown table of `rows` (dicts), numbers rounded, text never cut; columns default to the first row's keys."""
    if not rows:
        return "(no rows)"
    columns = columns or list(rows[0])
    out = ["| " + " | ".join(cell(c) for c in columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    out += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(out)


def fold(summary: str, text: str) -> str:
    """`text` (Markdown) in a fold whose `summary` is in view."""
    return f"<details><summary>{summary}</summary>\n\n{text}\n\n</details>"


def folded(shown: list[dict], rows: list[dict], columns: list[str] | None = None) -> str:
    """The `shown` rows as a table in view, then the other rows of `rows`, in their order, in a fold: a long table
    read in a glance, each row once (a column such as the step or case says where a folded row belongs)."""
    from shardlab.errors import UsageError

    stray = [row for row in shown if row not in rows]
    if stray:
        raise UsageError(f"{len(stray)} row(s) to show are not rows of the table, the first {stray[0]!r}")
    other = [row for row in rows if row not in shown]
    if not other:
        return table(shown, columns)
    summary = f"the other {len(other)} row{'s' * (len(other) != 1)} (of {len(rows)})"
    return f"{table(shown, columns)}\n\n{fold(summary, table(other, columns))}"


def excerpt(source: str, kept: list[str]) -> str:
    """The lines of `source` that hold one of `kept` (each must be found), in order, a `# ... N lines` comment where
    lines were left out, the common indent removed: a few lines of the library's own
    code, printed from it so they stay true."""
    import textwrap

    from shardlab.errors import UsageError

    lines = source.splitlines()
    missing = [k for k in kept if not any(k in line for line in lines)]
    if missing:
        raise UsageError(f"the source holds no line with {missing[0]!r}: the excerpt would no longer say what it did")
    out, last = [], -1
    for i, line in enumerate(lines):
        if any(k in line for k in kept):
            if i > last + 1 and out:
                gap = i - last - 1
                out.append(" " * (len(line) - len(line.lstrip())) + f"# ... {gap} line{'s' * (gap > 1)}")
            out.append(line)
            last = i
    return textwrap.dedent("\n".join(out))


def display_excerpt(source: str, kept: list[str], folded: str | None = None) -> None:
    """Show `excerpt(source, kept)` as a Python block: in view, or with `folded` (a summary) in a fold."""
    from IPython.display import Markdown, display

    block = f"```python\n{excerpt(source, kept)}\n```"
    display(Markdown(block if folded is None else fold(folded, block)))


def display_table(rows: list[dict], columns: list[str] | None = None, shown: list[dict] | None = None) -> None:
    """Show `table(rows)` in a notebook (plain text elsewhere); with `shown`, those in view, the rest folded."""
    from IPython.display import Markdown, display

    display(Markdown(table(rows, columns) if shown is None else folded(shown, rows, columns)))


def display_text(lines: list[str], folded: str | None = None) -> None:
    """Show `lines`, one paragraph each; with `folded` (a summary), in a fold a reader opens when they choose to."""
    from IPython.display import Markdown, display

    text = "\n\n".join(lines)
    display(Markdown(text if folded is None else fold(folded, text)))


def display_steps(rows: list[dict], keys: list, saved_key) -> None:
    """Stage 3b's resume table: `replay.step_rows` with losses to 6 places, in view up to the first step whose
    key (`keys`, one per step) differs from the `saved_key` (the first fresh permutation), the rest folded."""
    import numpy as np

    shown = [
        {**row, "control loss": f"{row['control loss']:.6f}", "resumed loss": f"{row['resumed loss']:.6f}"}
        for row in rows
    ]
    first_draw = next((n for n, key in enumerate(keys) if not np.array_equal(key, saved_key)), len(shown) - 1)
    display_table(shown, shown=shown[: first_draw + 1])
