"""``markdown``: the report as GitHub-flavoured Markdown tables."""

from mtb.api import Reporter
from mtb_report.model import Report, Table
from mtb_report.tables import build_report


def escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_lines(table: Table) -> list[str]:
    lines = [f"### {table.title}", ""]
    lines.append("| " + " | ".join(table.columns) + " |")
    lines.append("|" + "|".join("---" for _ in table.columns) + "|")
    lines += ["| " + " | ".join(escape(c) for c in row) + " |" for row in table.rows]
    if table.notes:
        lines += ["", *(f"_{note}_" for note in table.notes)]
    return [*lines, ""]


def render_markdown(report: Report) -> str:
    lines = ["# MiniTrainBench report", ""]
    lines += [f"> **Warning:** {warning}" for warning in report.warnings]
    if report.warnings:
        lines.append("")
    for section in report.sections:
        lines += [f"## {section.title}", ""]
        lines += [f"> **Warning:** {warning}" for warning in section.warnings]
        if section.warnings:
            lines.append("")
        for table in section.tables:
            lines += table_lines(table)
    return "\n".join(lines).rstrip("\n") + "\n"


class MarkdownReporter(Reporter):
    name = "markdown"
    description = "tables per environment and comparable-settings group, as Markdown"
    suffix = ".md"

    def render(self, documents: list[dict]) -> str:
        return render_markdown(build_report(documents))
