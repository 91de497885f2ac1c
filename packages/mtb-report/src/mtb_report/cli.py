"""``mtb report`` and ``mtb evidence``: click commands added through ``mtb_register_commands``.

``mtb report RESULT...`` renders; ``mtb report compare`` is a real subcommand.
The group reads a first argument that names no subcommand as the start of
the paths to render.
"""

import json
from pathlib import Path

import click

from mtb.api import UsageError

RENDER = "\0render"  # never typed: the group routes bare paths here


class PathsContext(click.Context):
    """The render command's context speaks as ``mtb report`` itself in usage and errors."""

    @property
    def command_path(self) -> str:
        return self.parent.command_path


class PathsCommand(click.Command):
    context_class = PathsContext


class ReportGroup(click.Group):
    """A group whose arguments are result paths unless the first names a subcommand."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [RENDER, *args]
        return super().parse_args(ctx, args)

    def get_command(self, ctx, name):
        return render_command if name == RENDER else super().get_command(ctx, name)

    def format_usage(self, ctx, formatter):
        formatter.write_usage(ctx.command_path, "RESULT... [-o FILE] | COMMAND [ARGS]...")


def reporter_for(pm, output: str | None, format_name: str | None):
    registry = pm.registry("reporter")
    if format_name:
        return registry.get(format_name)
    suffix = Path(output).suffix if output else ".md"
    for entry in registry:
        if entry.item.suffix == suffix:
            return entry.item
    known = ", ".join(sorted(e.item.suffix for e in registry if e.item.suffix))
    raise UsageError(f"--output: no reporter writes {suffix!r} files; known suffixes: {known}")


@click.command(name="report", cls=PathsCommand)
@click.argument("results", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o",
    "--output",
    help="file to write; its suffix picks the reporter [default: Markdown on stdout]",
)
@click.option(
    "--format", "format_name", help="reporter name instead of the suffix (see `mtb plugins`)"
)
@click.option(
    "--append",
    is_flag=True,
    help="add the documents to the end of --output (a reporter that appends, such as jsonl)",
)
@click.pass_context
def render_command(ctx, results, output, format_name, append):
    """Render result files and directories (searched recursively) as one report."""
    from mtb.api import append_whole, check_output, write_atomic
    from mtb_report.loading import load

    reporter = reporter_for(ctx.find_root().obj, output, format_name)
    check_append(reporter, output, append)
    if output:
        check_output("--output", output)
    text = reporter.render(load(list(results)))
    if output:
        (append_whole if append else write_atomic)(output, text)
        click.echo(f"{'appended to' if append else 'wrote'} {output}", err=True)
    else:
        click.echo(text, nl=False)


def check_append(reporter, output: str | None, append: bool) -> None:
    """--append only with a reporter that appends (jsonl) and a file to append to."""
    if append and not reporter.appends:
        raise UsageError(
            f"--append: reporter {reporter.name!r} does not append; use one that does (jsonl)"
        )
    if append and not output:
        raise UsageError("--append: needs --output FILE to append to")


@click.group(cls=ReportGroup, name="report", no_args_is_help=True)
def report_group():
    """Render results as Markdown, CSV or HTML, and compare runs.

    `mtb report RESULT... [-o report.md|report.html|report.csv]` renders files
    and directories (recursively): one section per environment, one table per
    group of comparable settings, failures listed with their error.
    """


def parse_threshold(ctx, param, value: str) -> float:
    text = value.strip()
    try:
        number = float(text.rstrip("%"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a percentage like 5%") from None
    if number < 0:
        raise click.BadParameter("must not be negative")
    return number / 100


@report_group.command("compare")
@click.argument("base", type=click.Path())
@click.argument("new", type=click.Path())
@click.option(
    "--threshold",
    default="5%",
    callback=parse_threshold,
    show_default=True,
    help="relative change a metric may move in its bad direction",
)
def compare_command(base, new, threshold):
    """Compare NEW results with BASE; exit 1 when a metric regresses past the threshold.

    Results are matched by config fingerprint and world size; throughput up
    is good, time and memory up are bad. A change inside the noise of the
    repeats never fails the gate.
    """
    from mtb_report.compare import changes_table, compare, is_regression
    from mtb_report.loading import load
    from mtb_report.markdown import table_lines

    changes, unmatched = compare(load([base]), load([new]), threshold)
    click.echo("\n".join(table_lines(changes_table(changes, threshold))))
    for line in unmatched:
        click.echo(line)
    regressions = [c for c in changes if is_regression(c)]
    click.echo(f"{len(regressions)} regression(s), {len(changes)} metric(s) compared")
    if regressions:
        raise SystemExit(1)


@click.group("evidence")
def evidence_group():
    """Tamper-evident manifests of result files."""


@evidence_group.command("manifest")
@click.argument("directory", type=click.Path())
@click.option(
    "-o",
    "--output",
    default="evidence_manifest.json",
    show_default=True,
    help="manifest file to write",
)
def manifest_command(directory, output):
    """Record each result file's SHA256, kind, status, command and provenance."""
    from mtb.api import check_output, write_atomic
    from mtb_report.evidence import build_manifest

    check_output("--output", output)
    manifest = build_manifest(Path(directory), Path(output))
    write_atomic(output, json.dumps(manifest, indent=2) + "\n")
    click.echo(f"wrote {output}: {len(manifest['files'])} file(s)", err=True)


@evidence_group.command("verify")
@click.argument("manifest", type=click.Path(dir_okay=False))
def verify_command(manifest):
    """Report added, missing and altered result files; exit 1 on any."""
    from mtb_report.evidence import verify

    found = verify(Path(manifest))
    for change, paths in found.items():
        for path in paths:
            click.echo(f"{change}: {path}")
    total = sum(len(p) for p in found.values())
    click.echo("verified: no changes" if not total else f"{total} change(s)")
    if total:
        raise SystemExit(1)
