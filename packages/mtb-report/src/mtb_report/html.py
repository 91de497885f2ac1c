"""``html``: one self-contained file, tables plus plots embedded as PNG data URIs."""

import base64
from html import escape

from mtb.api import Reporter
from mtb_report.model import Report, Table
from mtb_report.plots import figures
from mtb_report.tables import build_report

STYLE = """
body { font-family: sans-serif; margin: 2em; }
table { border-collapse: collapse; margin-bottom: 1em; }
table { font-size: 0.8em; }
.table { overflow-x: auto; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.4em; text-align: right; }
th { background: #eee; }
.warning { background: #fff3cd; border: 1px solid #e0b000; padding: 0.5em; }
.plots img { max-width: 100%; margin: 0.5em; }
"""


def cell_html(text: str) -> str:
    """Escaped; a number (``1.2 ± 0.1 MiB``) never breaks across lines, words may."""
    numeric = text[:1].isdigit() or text[:1] in "+-"
    return escape(text).replace(" ", "\u00a0") if numeric else escape(text)


def table_html(table: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell_html(c)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    notes = "".join(f"<p><em>{escape(n)}</em></p>" for n in table.notes)
    grid = f'<div class="table"><table><tr>{head}</tr>{body}</table></div>'
    return f"<h3>{escape(table.title)}</h3>{grid}{notes}"


def warnings_html(warnings: list[str]) -> str:
    return "".join(f'<p class="warning"><b>Warning:</b> {escape(w)}</p>' for w in warnings)


def plots_html(documents: list[dict]) -> str:
    images = "".join(
        f'<img class="plot" alt="{escape(title)}" title="{escape(title)}" '
        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        for title, png in figures(documents)
    )
    return f'<div class="plots">{images}</div>' if images else ""


def render_html(report: Report) -> str:
    parts = [warnings_html(report.warnings)]
    for section in report.sections:
        parts.append(f"<h2>{escape(section.title)}</h2>{warnings_html(section.warnings)}")
        parts.append(plots_html(section.documents))
        parts += [table_html(t) for t in section.tables]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>MiniTrainBench report</title><style>{STYLE}</style></head>"
        f"<body><h1>MiniTrainBench report</h1>{''.join(parts)}</body></html>\n"
    )


class HtmlReporter(Reporter):
    name = "html"
    description = "one self-contained HTML file: tables and embedded plots"
    suffix = ".html"

    def render(self, documents: list[dict]) -> str:
        return render_html(build_report(documents))
