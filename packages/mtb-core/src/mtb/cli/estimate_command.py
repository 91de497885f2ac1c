"""``mtb estimate-memory``: analytic per-rank model-state bytes of each strategy.

A planning tool in the spirit of DeepSpeed's memory estimators: parameters,
gradients and optimizer state one rank holds, from each registered
strategy's own formula (``Strategy.state_bytes_estimate``), the same one
every train result sets beside its measured bytes.
"""

import json

import click

from mtb.config import OPTIMIZERS, PRECISIONS
from mtb.presets import PRESETS

STATES = ("parameters", "gradients", "optimizer_state", "total")


def layout_of(preset: str, world_size: int, tp: int, pp: int):
    """``world_size`` ranks with ``tp`` and ``pp``, data parallel the rest, checked."""
    from mtb.config import resolve
    from mtb.layout import Layout

    flags = {"preset": preset, "launch": {"nproc_per_node": world_size}}
    return Layout.of(resolve(flags={**flags, "parallel": {"tp": tp, "pp": pp}}))


def estimates(pm, preset: str, world_size: int, training, only: str | None, tp=1, pp=1):
    """One row per strategy: the bytes one rank holds, or a note on why it cannot run."""
    from mtb.config import ModelConfig
    from mtb.errors import UsageError
    from mtb.model import parameter_count, rank_parameter_count

    layout = layout_of(preset, world_size, tp, pp)
    model = ModelConfig(**PRESETS[preset])
    parameters = parameter_count(model)
    rank_parameters = rank_parameter_count(model, tp, pp)
    rows = []
    for entry in pm.registry("strategy"):
        if only and entry.name != only:
            continue
        strategy, limit = entry.item, entry.item.max_world_size
        row = {"strategy": entry.name, "preset": preset, "world_size": world_size}
        row.update(layout=layout.label, parameter_count=parameters)
        row["unavailable"] = entry.unavailable_reason
        try:
            strategy.check_layout(layout)
        except UsageError as refusal:
            row["note"] = str(refusal).split(": ", 1)[1]
        if limit is not None and world_size > limit:
            row["note"] = f"runs on at most {limit} process(es)"
        elif "note" not in row:
            row.update(strategy.state_bytes_estimate(rank_parameters, layout.dp_shard, training))
        rows.append(row)
    if only and not rows:
        pm.registry("strategy").get(only)  # the registry's one-line error
    return rows


@click.command("estimate-memory")
@click.option("--preset", type=click.Choice(tuple(PRESETS)), default="small", show_default=True)
@click.option("--world-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--tp", type=click.IntRange(min=1), default=1, show_default=True, help="tensor-parallel size"
)
@click.option(
    "--pp", type=click.IntRange(min=1), default=1, show_default=True, help="pipeline stages"
)
@click.option("--strategy", help="one strategy  [default: every registered one]")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True)
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="adamw", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.pass_context
def estimate_command(ctx, preset, world_size, tp, pp, strategy, precision, optimizer, as_json):
    """Per-rank model-state memory (parameters, gradients, optimizer state) by strategy.

    Analytic bytes one rank holds at --world-size for the --preset's shape,
    with --tp tensor-parallel ranks and --pp pipeline stages (data parallel
    over the rest); activations and allocator overheads are not included.
    Strategies that cannot run that world size or layout say so.
    """
    from rich.table import Table

    from mtb.config import TrainingConfig
    from mtb.console import print_wide
    from mtb.memory import format_size

    training = TrainingConfig(precision=precision, optimizer=optimizer)
    rows = estimates(ctx.find_root().obj, preset, world_size, training, strategy, tp, pp)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(
        title=f"model state per rank: preset {preset}, world size {world_size}, "
        f"layout {rows[0]['layout'] if rows else '-'}, {precision}, {optimizer}"
    )
    table.add_column("strategy")
    for state in STATES:
        table.add_column(state.replace("_", " "), justify="right")
    table.add_column("note")
    for row in rows:
        sizes = [format_size(row.get(state)) for state in STATES]
        unavailable = f"unavailable: {row['unavailable']}" if row["unavailable"] else ""
        note = row.get("note") or unavailable
        table.add_row(row["strategy"], *sizes, note)
    print_wide(table)
