"""The ``report`` plugin (entry point ``mtb = report``): reporters and commands.

Reporter classes are light (plain Python); matplotlib is imported only when a
plot is drawn, and nothing here imports torch.
"""

from mtb.api import hookimpl


@hookimpl
def mtb_register_reporters(register):
    from mtb_report.csv_reporter import CsvReporter
    from mtb_report.html import HtmlReporter
    from mtb_report.markdown import MarkdownReporter

    for reporter in (MarkdownReporter(), CsvReporter(), HtmlReporter()):
        register(reporter)


@hookimpl
def mtb_register_commands(cli):
    from mtb_report.cli import evidence_group, report_group

    cli.add_command(report_group)
    cli.add_command(evidence_group)
