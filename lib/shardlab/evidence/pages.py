"""HTML copies of executed notebooks that open completely from a folder: no Jupyter, no network.

nbconvert's lab template loads require.js, MathJax and mermaid from a CDN. The template used
here drops those scripts, and the notebooks' TeX is drawn beforehand by matplotlib's mathtext
(already a course dependency) as inline SVG images with the TeX as their alt text, so a page
needs no script at all to show its maths. A formula mathtext cannot draw is a PageError at
export time, never a page with raw `$...$` in it.
"""

import base64
import hashlib
import io
import os
import re
from pathlib import Path

import nbformat
from jinja2 import DictLoader

from shardlab.errors import PageError
from shardlab.io import inside

TEMPLATE = "shardlab_offline.html.j2"
TEMPLATES = {
    TEMPLATE: """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block input_group -%}
{%- if cell.metadata.get("jupyter", {}).get("source_hidden") -%}
<details class="shardlab-folded"><summary>code folded in Jupyter: open to read it</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{%- endblock input_group -%}
{%- block output_group -%}
{%- if cell.metadata.get("jupyter", {}).get("outputs_hidden") -%}
<details class="shardlab-folded-output"><summary>
{{- cell.metadata.get("output_summary", "output folded in Jupyter: open to read it") -}}
</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{%- endblock output_group -%}
"""
}
INLINE_PT, DISPLAY_PT = 11.5, 13.5  # the lab stylesheet's body text is 14 px = 10.5 pt; TeX glyphs read small
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # fenced blocks and code spans keep their dollars
DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
INLINE = re.compile(r"(?<![\\$])\$(?=\S)([^$\n]+?)(?<=\S)\$(?!\d)")


def math_svg(tex: str, size_pt: float) -> tuple[bytes, float]:
    """(SVG bytes, depth below the baseline in pt) of `tex` drawn by mathtext; the same bytes every run."""
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties
    from matplotlib.mathtext import MathTextParser

    text = "$" + " ".join(tex.split()) + "$"
    with matplotlib.rc_context({"mathtext.fontset": "cm", "svg.hashsalt": "shardlab", "svg.fonttype": "path"}):
        prop = FontProperties(size=size_pt)
        try:
            width, height, depth, _, _ = MathTextParser("path").parse(text, dpi=72, prop=prop)
        except ValueError as exc:
            raise PageError(
                f"matplotlib's mathtext cannot draw {text!r} ({str(exc).splitlines()[-1]}); "
                "rewrite the formula in the TeX subset mathtext supports (see its docs) and run again"
            ) from exc
        fig = Figure(figsize=(width / 72, height / 72))
        fig.text(0, depth / height, text, fontproperties=prop)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", dpi=72, transparent=True, metadata={"Date": None})
    return buffer.getvalue(), depth


def math_html(tex: str, display: bool) -> str:
    """An <img> holding `tex` as a data: SVG (alt text = the TeX); display maths in its own centred block."""
    from html import escape

    svg, depth = math_svg(tex, DISPLAY_PT if display else INLINE_PT)
    source = base64.b64encode(svg).decode("ascii")
    image = (
        f'<img class="shardlab-math" alt="{escape(tex.strip())}" style="vertical-align: {-depth:.2f}pt" '
        f'src="data:image/svg+xml;base64,{source}">'
    )
    return f'\n\n<div style="text-align: center; margin: 0.8em 0">{image}</div>\n\n' if display else image


def render_math(markdown: str) -> str:
    """`markdown` with every $$...$$ and $...$ outside code replaced by its drawn image."""
    pieces, last = [], 0
    for code in CODE.finditer(markdown):
        pieces += [_math(markdown[last : code.start()]), code.group(0)]
        last = code.end()
    return "".join(pieces + [_math(markdown[last:])])


def _math(text: str) -> str:
    text = DISPLAY.sub(lambda m: math_html(m.group(1), display=True), text)
    return INLINE.sub(lambda m: math_html(m.group(1), display=False), text)


def merge_parameters(nb) -> None:
    """Show the parameters once: the defaults cell with the values papermill injected, its own cell dropped.

    Papermill runs a notebook with its `parameters` cell and then an `injected-parameters` cell that
    overrides some names; a notebook or page showing both makes a reader compare two cells to learn
    one set of values. Each injected value replaces the default on its line, the line's comment kept,
    and a name the defaults lack is added at the end. `stable.notebook` applies it to the executed
    notebook; a notebook that still holds both (an older receipt) is merged again on its page.
    """
    import ast

    tagged = {t: c for c in nb.cells for t in c.get("metadata", {}).get("tags", []) if t in PARAMETER_TAGS}
    if set(tagged) != PARAMETER_TAGS:
        return
    injected = {}
    for node in ast.parse(tagged["injected-parameters"].source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            injected[node.targets[0].id] = ast.get_source_segment(tagged["injected-parameters"].source, node.value)
    lines = []
    for line in tagged["parameters"].source.splitlines():
        found = re.match(r"(\w+)(\s*=\s*)([^#]*?)(\s*#.*)?$", line)
        if found and found[1] in injected:
            lines.append(f"{found[1]}{found[2]}{injected.pop(found[1])}{found[4] or ''}")
        else:
            lines.append(line)
    lines += [f"{name} = {value}  # given to this run" for name, value in injected.items()]
    tagged["parameters"].source = "# the values this run used\n" + "\n".join(lines)
    nb.cells.remove(tagged["injected-parameters"])


PARAMETER_TAGS = {"parameters", "injected-parameters"}


def notebook_html(nb) -> tuple[str, str, list[str]]:
    """(page body, joined CSS, the <style> blocks) of an executed notebook: offline template, maths drawn."""
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    from shardlab.course.results import CONCLUSION_TAG, HIDDEN_TAG

    nb = nbformat.from_dict(nb)  # a copy: the executed notebook on disk keeps its TeX
    merge_parameters(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = render_math(cell.source)
    exporter = HTMLExporter(extra_loaders=[DictLoader(TEMPLATES)], template_file=TEMPLATE)
    # records for machines (shardlab.course.results.HIDDEN_TAG) leave the page, so a cell holding only
    # records has no outputs and gets no output area at all; the executed notebook keeps them
    # and a conclusion cell shows its sentence without the call that chose it, as in Lab, where its source is folded
    remove = TagRemovePreprocessor(remove_single_output_tags={HIDDEN_TAG}, remove_input_tags={CONCLUSION_TAG})
    exporter.register_preprocessor(remove, enabled=True)
    body, _ = exporter.from_notebook_node(nb)
    styles = re.findall(r"<style[^>]*>.*?</style>", body, flags=re.S)
    css = "\n".join(re.sub(r"^<style[^>]*>|</style>$", "", block) for block in styles)
    return body, css, styles


def export_html(executed, sheets=None) -> Path:
    """Write `<name>.html` next to the executed notebook, readable offline without Jupyter.

    nbconvert embeds the same ~260 kB of CSS in every page; it goes to one content-addressed
    stylesheet in `sheets` (default: the page's own folder), which every page links by a
    relative path. `sheets` must hold the page's folder, so the link resolves inside any copy
    of that folder (a run's fixture pages link the stylesheet at the top of the run's folder).
    """
    executed = Path(executed)
    folder = executed.parent if sheets is None else Path(sheets)
    if not inside(executed.resolve(), folder.resolve()):
        raise PageError(f"the stylesheet folder {folder} does not hold {executed}; pass a folder above the page")
    body, css, styles = notebook_html(nbformat.read(executed, as_version=4))
    sheet = folder / f"notebook-{hashlib.sha256(css.encode()).hexdigest()[:12]}.css"
    if not sheet.exists():
        sheet.write_text(css, encoding="utf-8")
    href = Path(os.path.relpath(sheet, executed.parent)).as_posix()
    for index, block in enumerate(styles):
        body = body.replace(block, f'<link rel="stylesheet" href="{href}">' if index == 0 else "", 1)
    page = executed.with_suffix(".html")
    page.write_text(body, encoding="utf-8")
    return page
