"""The portfolio's three views of the gathered items: portfolio.json (machines), report.md and portfolio.html (people).

The page is plain HTML with inline CSS: no script, nothing fetched from another host, so it
opens from the unzipped folder. Every section names the files and keys its values came from.
"""

import hashlib
import json
from html import escape

from shardlab.core.files import sha256_file
from shardlab.evidence.audit import AUDIT
from shardlab.evidence.index import STYLE
from shardlab.handin.items import HANDOFF

FORMAT = 1
SHOWN = 4000  # characters of an item's data shown on the page (portfolio.json holds all of it)


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
    }


def _answer_md(answer: dict) -> str:
    if "missing" in answer:
        return f"**MISSING** — {answer['missing']}."
    return answer["text"]


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
        "## The profile's own hypothesis (recorded by stage 4)",
        str(report["profile_hypothesis"]),
        "",
    ]
    for ident, answer in run.answers.items():
        lines += [f"## {ident}: {answer['question']}", "", _answer_md(answer), ""]
    scores = [
        f"* {n}: " + (s["missing"] if "missing" in s else f"{s['correct']}/{s['questions']}, passed={s['passed']}")
        for n, s in run.selfcheck.items()
    ]
    return "\n".join(lines + ["## Self-check", *scores, ""])


def _sources(item: dict) -> str:
    rows = "".join(
        f"<li><code>{escape(str(s['file']))}</code>"
        + (f" : <code>{escape(str(s['key']))}</code>" if s["key"] else "")
        + (f" <span class=b>sha256 {escape(s['sha256'][:16])}…</span>" if s["sha256"] else " (written here)")
        + "</li>"
        for s in item["sources"][:12]
    )
    more = f"<li>and {len(item['sources']) - 12} more (portfolio.json)</li>" if len(item["sources"]) > 12 else ""
    return f"<ul>{rows}{more}</ul>"


def _section(item: dict) -> str:
    data = json.dumps(item["data"], indent=1, sort_keys=True)
    shown = data if len(data) <= SHOWN else data[:SHOWN] + "\n… (the rest is in portfolio/portfolio.json)"
    files = "".join(f'<li><a href="{escape(f)}">{escape(f)}</a></li>' for f in item["files"])
    missing = "".join(f"<li><b>missing</b>: {escape(m)}</li>" for m in item["missing"])
    return (
        f'<h2 id="{escape(item["id"])}">{escape(item["title"])}</h2>'
        + (f"<ul>{missing}</ul>" if missing else "")
        + (f"<p>Files:</p><ul>{files}</ul>" if files else "")
        + f"<p>Where it came from:</p>{_sources(item)}<pre>{escape(shown)}</pre>"
    )


def _answers(run) -> str:
    parts = []
    for ident, answer in run.answers.items():
        body = (
            f"<p><b>missing</b>: {escape(answer['missing'])}</p>"
            if "missing" in answer
            else f"<pre>{escape(answer['text'])}</pre><p class=b>from {escape(answer['file'])}</p>"
        )
        parts.append(f"<h3>{escape(ident)}</h3><p><i>{escape(answer['question'])}</i></p>{body}")
    return "<h2 id=answers>Written answers</h2>" + "".join(parts)


def _first(stage: dict) -> str:
    failed = stage["first_failure"]
    return f"{failed['check']}: {failed['diagnosis']}" if failed else ""


def html(run, found: dict, manifest_: dict) -> str:
    """portfolio.html: the hand-off list with each item's status, then every item, then the written answers."""
    rows = "".join(
        f'<tr><td><a href="#{escape(i["id"])}">{escape(i["title"])}</a></td>'
        f"<td>{'complete' if not i['missing'] else escape('missing: ' + '; '.join(i['missing']))}</td></tr>"
        for i in manifest_["items"]
    )
    spec = manifest_["implementation"]["spec"]
    verdicts = "".join(
        f"<tr><td>stage {escape(n)}</td><td>{v['passed']} of {v['checks']}</td><td>{escape(_first(v))}</td></tr>"
        for n, v in (found["stage_output"].data.get("checker") or {}).items()
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Portfolio</title>
<style>{STYLE}</style></head><body><h1>Portfolio — resume and profile a sharded training run</h1>
<p>Implementation: <code>{escape(json.dumps(spec))}</code>. Every number below comes from the receipts named
under it; four logical CPU devices of one host are not four machines, and a CPU trace is not accelerator
utilisation. The whole portfolio is in <a href="portfolio/portfolio.json">portfolio/portfolio.json</a>,
the short report in <a href="portfolio/report.md">portfolio/report.md</a>.</p>
<table><tr><th>hand-off item</th><th>status</th></tr>{rows}</table>
<h2>The checker's verdict</h2>
<table><tr><th>stage</th><th>checks passed</th><th>first failure</th></tr>{verdicts}</table>
{"".join(_section(i) for i in manifest_["items"])}{_answers(run)}</body></html>
"""
