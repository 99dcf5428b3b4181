"""The portfolio's three views of the gathered items: portfolio.json (machines), report.md and portfolio.html (people).

The page is plain HTML with inline CSS: no script, nothing fetched from another host, so it
opens from the unzipped folder. It opens with the status (ready, or every missing item and how
to add it), then the learner's answers and scores, then each item as tables and figures; every
section names the files and keys its values came from, and portfolio.json beside it holds all of it.
"""

import hashlib
import json
from html import escape

from shardlab.core.files import sha256_file
from shardlab.course.catalog import NOTEBOOKS
from shardlab.evidence.audit import AUDIT
from shardlab.evidence.index import STYLE, html_table
from shardlab.handin.items import HANDOFF, first_step, how_to

FORMAT = 1


def _implementation(run) -> dict:
    recorded = (run.audit.get("run") or {}).get("implementation")
    return {"spec": "reference" if run.implementation == "reference" else recorded, "run": run.audit.get("run")}


def manifest(run, found: dict) -> dict:
    """portfolio.json: per hand-off row its data, copied files, sources (file, key, sha256) and what is missing."""
    return {
        "format": FORMAT,
        "implementation": _implementation(run),
        "receipts": {
            "audit_sha256": sha256_file(run.receipts / AUDIT),
            "sources_sha256": hashlib.sha256(json.dumps(run.audit.get("sources"), sort_keys=True).encode()).hexdigest(),
            "source_files": len(run.audit.get("sources") or {}),
        },
        "items": [
            {
                "id": row.id,
                "title": row.title,
                "data": found[row.id].data,
                "files": [f"portfolio/{dest}" for _, dest in found[row.id].files],
                "sources": found[row.id].sources,
                "missing": found[row.id].absent,
            }
            for row in HANDOFF
        ],
        "written_answers": run.answers,
        "selfcheck": run.selfcheck,
        "status": status(found, run.workspace),
    }


def course_position(text: str) -> int:
    """Where `text` sits in the course: the position of the first notebook it names (-1: it names none)."""
    named = [i for i, name in enumerate(NOTEBOOKS) if f"{name}.ipynb" in text or f"of {name}" in text]
    return min(named) if named else -1


def status(found: dict, workspace=None) -> dict:
    """Ready only when nothing is missing; else every missing entry with its item, kind and where it goes, and
    `how_to`: how to add each kind, said once for all the entries of that kind.

    Entries come by kind (run evidence first, then answers, the hypothesis, self-checks) and within a kind in
    the order a learner meets the notebooks (an entry's place is the first notebook its text names)."""
    missing = [
        {
            "item": row.id,
            "what": entry,
            "kind": found[row.id].kind.get(entry, ""),
            "how": found[row.id].how.get(entry, ""),
        }
        for row in HANDOFF
        for entry in found[row.id].absent
    ]
    order = {kind: n for n, kind in enumerate(("", "run", "answer", "hypothesis", "selfcheck"))}  # the run's first
    missing.sort(key=lambda m: (order.get(m["kind"], 0), course_position(m["what"] + " " + m["how"])))  # stable
    kinds = list(dict.fromkeys(m["kind"] for m in missing if m["kind"]))
    first = first_step(workspace) if any(k != "run" for k in kinds) else ""
    return {
        "ready": not missing,
        "missing": missing,
        "first": first,
        "how_to": {k: how_to(k, workspace) for k in kinds},
    }


def grouped(status_: dict) -> list[tuple[str, list[tuple[int, dict]]]]:
    """[(how to add this kind, [(number in the list, entry), ...]), ...]: each how once, over its numbered entries."""
    numbered = list(enumerate(status_["missing"], 1))
    groups = [(status_["how_to"][k], [(n, m) for n, m in numbered if m["kind"] == k]) for k in status_["how_to"]]
    rest = [(n, m) for n, m in numbered if m["kind"] not in status_["how_to"]]
    return groups + ([("", rest)] if rest else [])


def status_line(status_: dict) -> str:
    """One line: 'ready to hand in' or 'incomplete: N items missing'."""
    count = len(status_["missing"])
    return "ready to hand in" if status_["ready"] else f"incomplete: {count} item{'s' * (count != 1)} missing"


def _answer_md(answer: dict) -> str:
    if "missing" in answer:
        return f"**MISSING** — {answer['missing']}."
    return answer["text"]


def _hypothesis_md(yours: dict | None) -> str:
    if not yours or not yours.get("value"):
        return "**MISSING** — listed at the top of the portfolio, with how to add it."
    value = yours["value"]
    return (
        f"Change `{value['change']}`, a cut of at least {value['threshold_ms']} ms, because: {value['because']} "
        f"(from {yours['from']})."
    )


def report_markdown(run, found: dict) -> str:
    """report.md: the short report, facts from the run beside the learner's own answers (never written for them)."""
    report = found["report"].data
    topo = report["topology"]
    lines = [
        "# Short report",
        "",
        "## Device topology (recorded by the run)",
        f"{len(topo['devices'] or [])} devices on backend `{topo['backend']}`, {topo['usable_cpus']} usable CPUs, "
        f"{topo['platform']}. {topo['label']}.",
        "",
        "## Measurement boundaries (recorded by the run)",
        f"* timing: {report['boundaries']['timing']}",
        f"* trace: {report['boundaries']['trace']}",
        "",
        "## Your stage 4 hypothesis",
        _hypothesis_md(report.get("your_hypothesis")),
        "",
        "## The hypothesis the run judged (recorded by stage 4)",
        str((report["profile_hypothesis"] or {}).get("text", "not recorded")),
        "",
    ]
    for ident, answer in run.answers.items():
        lines += [f"## {ident}: {answer['question']}", "", _answer_md(answer), ""]
    scores = [
        f"* {n}: " + (s["missing"] if "missing" in s else f"{s['correct']}/{s['questions']}, passed={s['passed']}")
        for n, s in run.selfcheck.items()
    ]
    return "\n".join(lines + ["## Self-check", *scores, ""])


ROWS = 20  # rows of a list shown on the page; portfolio.json holds all of them
DEPTH = 4  # nesting shown as tables; deeper records are shown as short JSON


def _scalar(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    text = str(value)
    return escape(text if len(text) <= 300 else text[:300] + " …")


def _is_scalar(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def table(value, depth: int = 0) -> str:
    """`value` as HTML for people: dicts as two-column tables, lists of records as tables, scalars as text."""
    if _is_scalar(value):
        return _scalar(value)
    flat = isinstance(value, (list, tuple, dict)) and all(
        _is_scalar(v) for v in (value.values() if isinstance(value, dict) else value)
    )
    if depth >= DEPTH and not flat:
        text = json.dumps(value, sort_keys=True)
        return f"<code>{escape(text if len(text) <= 200 else text[:200] + ' …')}</code>"
    if isinstance(value, dict):
        if not value:
            return "—"
        rows = "".join(f"<tr><th>{escape(str(k))}</th><td>{table(v, depth + 1)}</td></tr>" for k, v in value.items())
        return f"<table>{rows}</table>"
    value = list(value)
    if not value:
        return "—"
    if all(_is_scalar(v) for v in value):
        shown = ", ".join(_scalar(v) for v in value[: ROWS * 3])
        return shown + (f" … ({len(value)} in all, portfolio.json)" if len(value) > ROWS * 3 else "")
    if all(isinstance(v, dict) for v in value):
        columns = list(dict.fromkeys(k for v in value for k in v))
        body = ([table(v.get(c), depth + 1) for c in columns] for v in value[:ROWS])
        more = f"<p class=b>… {len(value) - ROWS} more rows in portfolio.json</p>" if len(value) > ROWS else ""
        return html_table(columns, body) + more
    return "<ol>" + "".join(f"<li>{table(v, depth + 1)}</li>" for v in value[:ROWS]) + "</ol>"


def _sources(item: dict) -> str:
    rows = "".join(
        f"<li><code>{escape(str(s['file']))}</code>"
        + (f" : <code>{escape(str(s['key']))}</code>" if s["key"] else "")
        + (f" <span class=b>sha256 {escape(s['sha256'][:16])}…</span>" if s["sha256"] else " (written here)")
        + "</li>"
        for s in item["sources"]
    )
    summary = f"where these values came from ({len(item['sources'])} sources)"
    return f"<details><summary>{summary}</summary><ul>{rows}</ul></details>"


def _section(item: dict) -> str:
    figures = "".join(
        f'<figure><img src="{escape(f)}" alt="{escape(f)}" style="max-width:100%"><figcaption>{escape(f)}</figcaption>'
        "</figure>"
        for f in item["files"]
        if f.endswith((".png", ".svg"))
    )
    files = "".join(f'<li><a href="{escape(f)}">{escape(f)}</a></li>' for f in item["files"])
    missing = "".join(f"<li><b>missing</b>: {escape(m)}</li>" for m in item["missing"])
    data = {k: v for k, v in item["data"].items() if k != "answers"}  # answers have their own section
    return (
        f'<h2 id="{escape(item["id"])}">{escape(item["title"])}</h2>'
        + (f"<ul>{missing}</ul>" if missing else "")
        + figures
        + table(data)
        + (f"<p>Files:</p><ul>{files}</ul>" if files else "")
        + _sources(item)
    )


def _paragraphs(text: str) -> str:
    return "".join(f"<p>{escape(part).replace(chr(10), '<br>')}</p>" for part in text.split("\n\n") if part.strip())


def _answers(run) -> str:
    parts = []
    for ident, answer in run.answers.items():
        if "missing" in answer:  # how to add it is said once, in the status list at the top
            where = f"in {answer['notebook']}.ipynb"
            body = f"<p><b>missing</b> ({escape(where)}): {escape(answer['missing'])}</p>"
        else:
            body = f"<blockquote>{_paragraphs(answer['text'])}</blockquote><p class=b>from {escape(answer['file'])}</p>"
        parts.append(f"<h3>{escape(ident)}</h3><p><i>{escape(answer['question'])}</i></p>{body}")
    return "<h2 id=answers>Your written answers</h2>" + "".join(parts)


def _selfcheck(run) -> str:
    rows = (
        [escape(n), escape(s["missing"]), ""]
        if "missing" in s
        else [escape(n), f"{s['correct']} of {s['questions']}", "passed" if s["passed"] else "below 80 %"]
        for n, s in run.selfcheck.items()
    )
    return "<h2 id=selfcheck-scores>Self-check scores</h2>" + html_table(("notebook", "score", ""), rows)


def _first(stage: dict) -> str:
    failed = stage["first_failure"]
    return f"{failed['check']}: {failed['diagnosis']}" if failed else ""


def _item_state(missing: list) -> str:
    """A hand-off item's cell in the list: complete, or how many of its entries the status list names."""
    return "complete" if not missing else f"{len(missing)} missing (each listed at the top, with how to add it)"


def _status(status_: dict) -> str:
    if status_["ready"]:
        return "<p><b>Status: ready to hand in</b> — nothing the hand-off list asks for is missing.</p>"
    lead = f"<p><b>Status: {escape(status_line(status_))}</b>. Add each, then build the portfolio again.</p>"
    parts = [f"<p class=b>{escape(status_['first'])}</p>"] if status_.get("first") else []
    for how, entries in grouped(status_):
        said = f"<p class=b>how: {escape(how)}</p>" if how else ""
        rows = "".join(
            f"<li value={n}>{escape(m['what'])}" + (f" — {escape(m['how'])}" if m["how"] else "") + "</li>"
            for n, m in entries
        )
        parts.append(f"{said}<ol>{rows}</ol>")
    return lead + "".join(parts)


def html(run, found: dict, manifest_: dict) -> str:
    """portfolio.html: the status, the hand-off list, each item as tables and figures, the learner's answers."""
    items = html_table(
        ("hand-off item", "status"),
        (
            [f'<a href="#{escape(i["id"])}">{escape(i["title"])}</a>', _item_state(i["missing"])]
            for i in manifest_["items"]
        ),
    )
    spec = manifest_["implementation"]["spec"]
    verdicts = html_table(
        ("stage", "checks passed", "what ran", "first failure"),
        (
            [f"stage {escape(n)}", f"{v['passed']} of {v['checks']}", escape(v.get("scope", "")), escape(_first(v))]
            for n, v in (found["stage_output"].data.get("checker") or {}).items()
        ),
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Portfolio</title>
<style>{STYLE}</style></head><body><h1>Portfolio — resume and profile a sharded training run</h1>
{_status(manifest_["status"])}
<p>Implementation: <code>{escape(json.dumps(spec))}</code>. Every number below comes from the receipts named
under it; four logical CPU devices of one host are not four machines, and a CPU trace is not accelerator
utilisation. The same data for machines is in <a href="portfolio/portfolio.json">portfolio/portfolio.json</a>,
the short report in <a href="portfolio/report.md">portfolio/report.md</a>.</p>
{items}
<h2>The checker's verdict</h2>
{verdicts}
{_answers(run)}{_selfcheck(run)}{"".join(_section(i) for i in manifest_["items"])}</body></html>
"""
