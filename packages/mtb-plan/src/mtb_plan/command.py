"""What ``mtb plan`` does: plan, print the table, write the document, verify when asked."""

import click

from mtb.api import default_output, format_size, get_plugin_manager, write_result
from mtb_plan import profile as profiles
from mtb_plan.planning import World, capacity_per_rank, check_fits, plan_document, plan_rows
from mtb_plan.workload import Workload

#: the table's width when stdout is a file or a pipe (a terminal's own width otherwise)
TABLE_WIDTH = 150


def run_plan(pm, profile_path: str, options: dict) -> dict:
    """The plan of ``options`` on the profile's machine, printed and written; verified on ask."""
    pm = pm or get_plugin_manager()
    profile = profiles.load(profile_path)
    workload = Workload.of(
        options["preset"],
        options["global_batch"],
        options["precision"] or profile.precision,
        options["optimizer"],
    )
    world = World(
        nodes=options["nodes"], per_node=options["devices_per_node"] or profile.devices_per_node
    )
    rows = plan_rows(pm, workload, world, profile)
    check_fits(rows, world, capacity_per_rank(profile, world), workload)
    document = plan_document(pm, workload, world, profile, rows)
    output = options["output"] or default_output("plan", workload.preset)
    if options["verify_top"] or options["verify_layout"]:
        from mtb_plan.verify import verify

        write_result(pm, document, output)
        document = verify(pm, document, options, output)
    print_table(document, options["top"])
    path = write_result(pm, document, output)
    click.echo(f"plan written to {path}")
    return document


def print_table(document: dict, top: int) -> None:
    """The ranked table (``top`` rows that fit), then one line on what does not fit or run."""
    from rich.table import Table

    from mtb.api import plain_console, stdout

    config = document["config"]
    workload = config["workload"]
    measured = "measured" if config["profile"]["measured"] else "written by hand, not measured"
    table = Table(
        title=f"plan: {workload['preset']}, global batch {workload['global_batch']}, "
        f"{config['world']['world_size']} ranks ({config['world']['nodes']} node(s)); "
        f"predicted from profile {config['profile']['name']!r} ({measured})"
    )
    for column in (
        "rank",
        "layout",
        "step ms",
        "tokens/s",
        "MFU",
        "peak memory / rank",
        "dominant",
    ):
        table.add_column(column, justify="left" if column in ("layout", "dominant") else "right")
    verified = document.get("verification") is not None
    if verified:
        table.add_column("measured step ms", justify="right")
        table.add_column("error", justify="right")
    for row in [row for row in document["layouts"] if row["fits"]][:top]:
        table.add_row(*_cells(row, verified))
    (stdout if stdout.is_terminal else plain_console(width=TABLE_WIDTH)).print(table)
    _print_left_out(document)


def _cells(row: dict, verified: bool) -> list[str]:
    predicted = row["predicted"]
    cells = [
        str(row["rank"]),
        row["label"],
        f"{predicted['step_time_ms']:,.1f}",
        f"{predicted['tokens_per_s']:,.0f}",
        f"{predicted['mfu']:.1%}" if predicted.get("mfu") is not None else "-",
        format_size(predicted["peak_memory_bytes"]),
        predicted["dominant"],
    ]
    if verified:
        measured, error = row.get("measured") or {}, row.get("error") or {}
        step = measured.get("step_time_ms")
        cells.append(f"{step:,.1f}" if step else (measured.get("status") or ""))
        cells.append(f"{error['step_time']:+.1%}" if error.get("step_time") is not None else "")
    return cells


def _print_left_out(document: dict) -> None:
    rows = document["layouts"]
    unfitting = sum(1 for row in rows if row["predicted"] and not row["fits"])
    refused = sum(1 for row in rows if row["refused"])
    fitting = sum(1 for row in rows if row["fits"])
    click.echo(
        f"{fitting} layout(s) fit in {format_size(document['memory_capacity_bytes'])} per rank; "
        f"{unfitting} predicted not to fit; {refused} refused by the runtime (reasons in the JSON)"
    )
