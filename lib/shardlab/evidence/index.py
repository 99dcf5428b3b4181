"""receipts/index.html: the page to open first — what ran, the headline table, the figure, every link.

Built from the folder's audit.json (see evidence/audit.py for its schema) and nothing else,
so it says exactly what the audit says. Plain HTML with a few lines of inline CSS: no script,
no font or stylesheet from another host, readable from a file:// URL.
"""

import json
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from shardlab.core import files
from shardlab.evidence.audit import AUDIT
from shardlab.evidence.headline import facts, run_line

INDEX = "index.html"
TITLES = {
    "stage1_batches": "Stage 1 — the next batch is explicit",
    "stage2_update": "Stage 2 — derive the global update before distributing it",
    "stage3a_checkpoint": "Stage 3 — save a checkpoint the next process can trust",
    "stage3b_resume": "Stage 3 — a fresh kernel continues the same experiment",
    "stage3c_orbax_lesson": "Stage 3 — the Orbax lesson's receipt, replayed",
    "stage4a_profile": "Stage 4 — measure the boundary you intend to optimise",
    "stage4b_beyond": "After stage 4 — what a practitioner does next (optional)",
    "stage5a_protocol": "Stage 5 — several controllers: the protocol and its drills",
    "stage5b_scaling": "Stage 5 — several controllers: saving costs, scaling, step times, the runbook",
}
STYLE = """body{font:15px/1.5 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.35em .6em;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.b{color:#666;font-size:90%}
code,pre{background:#f6f6f6;padding:.1em .3em}pre{padding:.6em;overflow-x:auto}img{max-width:100%}"""


def html_table(head, rows, faint: int | None = None) -> str:
    """One `<table>` of every page: `head` as text (escaped), each row's cells as HTML; column `faint` in grey."""
    cells = "".join(f"<th>{escape(str(h))}</th>" for h in head)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=b' if i == faint else ''}>{c}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{cells}</tr>{body}</table>"


def _table(rows, head) -> str:
    """A table of text: every cell escaped, the third (the boundary a fact keeps) in grey."""
    return html_table(head, ([escape(str(c)) for c in r] for r in rows), faint=2)


def _environment(env: dict | None) -> list[tuple[str, str]]:
    if not env:
        return [("environment", "not recorded (stage 4 did not run)")]
    packages = ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items())
    return [
        ("Python", str(env.get("python"))),
        ("packages", packages),
        ("platform", f"{env.get('platform')} ({env.get('machine')})"),
        ("CPUs", f"{env.get('usable_cpus')} usable of {env.get('cpu_count')}"),
        ("JAX devices", f"{len(env.get('devices') or [])} on backend {env.get('backend')}: logical, one host"),
    ]


def _stages(audit: dict, out_dir: Path) -> str:
    items = []
    for name, entry in (audit.get("notebooks") or {}).items():
        page = entry.get("html")
        link = f'<a href="{escape(page)}">{escape(TITLES.get(name, name))}</a>' if page else escape(name)
        executed = escape(entry["executed"])
        items.append(f'<li>{link} — executed notebook <a href="{executed}">{executed}</a></li>')
    for fixture, found in (audit.get("fresh_kernel_recovery") or {}).items():
        folder = (found or {}).get("folder", ".")
        pages = [f"{folder}/{n}.html" for n in ("stage3a_checkpoint", "stage3b_resume")]
        if folder != "." and all((out_dir / page).is_file() for page in pages):
            links = " and ".join(f'<a href="{escape(page)}">{escape(page)}</a>' for page in pages)
            items.append(f"<li>Stage 3 for the other fixture, {escape(fixture)}, each in a fresh kernel: {links}</li>")
    for extra in ("audit.json", "step.stablehlo.mlir", "drills.json", "wall_time.json", "portfolio.html"):
        if (out_dir / extra).is_file():
            items.append(f'<li><a href="{extra}">{extra}</a></li>')
    return "<ul>" + "".join(items) + "</ul>"


def _trace(trace: dict | None) -> str:
    if not trace or not trace.get("xplane"):
        return "<p>No trace in this folder (stage 4 did not run).</p>"
    xplane, perfetto = escape(trace["xplane"]), escape(trace["perfetto"])
    logdir = escape(trace["xplane"].split("/plugins/")[0])
    return f"""<p>Files: <a href="{xplane}">{xplane}</a> (XPlane) and <a href="{perfetto}">{perfetto}</a>
(Perfetto JSON). Each traced transition is one <code>sharded_learner_step</code>, marked as a profiler step,
holding <code>prepare_and_place</code> and <code>compiled_update_and_wait</code>.</p>
<ul><li><b>XProf</b> (<code>pip install xprof</code>, any folder): <code>xprof --logdir {logdir} --port 6006</code>
from this folder, then open <code>localhost:6006</code>; the run is called <code>shardlab</code>. Overview and
step views use the step markers; Tools → Trace Viewer shows the nested annotations and the all-reduces.</li>
<li><b>Perfetto UI</b> (a web page; the trace is read in the browser, not uploaded): open
<code>ui.perfetto.dev</code>, choose “Open trace file” and pick <code>{perfetto}</code>.</li></ul>
<p>A CPU trace on one host, not accelerator utilisation. The page <code>docs/evidence.md</code> of the
course says more.</p>"""


def page(audit: dict, out_dir, written: str) -> str:
    """The whole index page as a string."""
    out_dir = Path(out_dir)
    figure = (audit.get("figure") or {}).get("svg")
    figure_html = f'<img src="{escape(figure)}" alt="the three-panel evidence figure">' if figure else "<p>none</p>"
    missing = audit.get("missing") or []
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>shardlab receipts: {escape(run_line(audit))}</title>
<style>{STYLE}</style></head><body>
<h1>shardlab receipts</h1>
<p>{escape(run_line(audit))}; written {escape(written)}. Four logical CPU devices of one host: nothing here
measures network behaviour, accelerator throughput or cluster scaling.</p>
<h2>Headline</h2>
{_table(facts(audit), ("what", "this run", "boundary"))}
{"<p><b>Missing from this run:</b> " + escape(", ".join(missing)) + "</p>" if missing else ""}
<h2>Evidence figure</h2>
{figure_html}
<h2>Stage pages</h2>
{_stages(audit, out_dir)}
<h2>The trace</h2>
{_trace(audit.get("trace"))}
<h2>Environment</h2>
{_table(_environment(audit.get("environment")), ("what", "value"))}
</body></html>
"""


def write_index(out_dir) -> Path:
    """Write out_dir/index.html from out_dir/audit.json (atomically) and return its path."""
    out_dir = Path(out_dir)
    audit = json.loads((out_dir / AUDIT).read_text(encoding="utf-8"))
    written = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    path = out_dir / INDEX
    files.replace(path, page(audit, out_dir, written))
    return path
