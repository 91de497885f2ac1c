"""``mtb estimate-memory``: analytic per-rank model-state bytes of each strategy.

A planning tool in the spirit of DeepSpeed's memory estimators: parameters,
gradients and optimizer state one rank holds, from each registered
strategy's own formula (``Strategy.state_bytes_estimate``), the same one
every train result sets beside its measured bytes.
"""

import json

import click

from mtb.config import OPTIMIZERS, PRECISIONS
from mtb.errors import UsageError
from mtb.presets import PRESETS

STATES = ("parameters", "gradients", "optimizer_state", "total")


def layout_of(preset: str, world_size: int, tp: int, pp: int, ep: int = 1):
    """``world_size`` ranks with ``tp``, ``pp`` and ``ep``, data parallel the rest, checked."""
    from mtb.config import resolve
    from mtb.layout import Layout

    flags = {"preset": preset, "launch": {"nproc_per_node": world_size}}
    return Layout.of(resolve(flags={**flags, "parallel": {"tp": tp, "pp": pp, "ep": ep}}))


def estimates(pm, preset: str, world_size: int, training, only: str | None, tp=1, pp=1, ep=1):
    """One row per strategy: the bytes one rank holds, or a note on why it cannot run."""
    from mtb.config import ModelConfig
    from mtb.model import expert_parameter_count, parameter_count, rank_parameter_count

    layout = layout_of(preset, world_size, tp, pp, ep)
    model = ModelConfig(**PRESETS[preset])
    parameters, experts = parameter_count(model), expert_parameter_count(model)
    rank_parameters = rank_parameter_count(model, tp, pp)
    rows = []
    for entry in pm.registry("strategy"):
        if only and entry.name != only:
            continue
        strategy = entry.item
        row = {"strategy": entry.name, "preset": preset, "world_size": world_size}
        row.update(layout=layout.label, ep=ep, parameter_count=parameters)
        row["unavailable"] = entry.unavailable_reason
        note = refusal(strategy, model, world_size, ep) or layout_refusal(strategy, layout)
        if note:
            row["note"] = note
        else:
            estimate = strategy.state_bytes_estimate(
                rank_parameters, layout.state_shards, training, experts, ep
            )
            row.update(estimate)
            if experts:
                row["expert_parameters_per_rank"] = experts // ep
        rows.append(row)
    if only and not rows:
        pm.registry("strategy").get(only)  # the registry's one-line error
    return rows


def refusal(strategy, model, world_size: int, ep: int) -> str | None:
    """Why ``strategy`` cannot run this shape at this world size and ep, if it cannot."""
    limit = strategy.max_world_size
    if limit is not None and world_size > limit:
        return f"runs on at most {limit} process(es)"
    if model.moe_experts and not strategy.trains_moe:
        return "cannot train a mixture-of-experts model"
    if ep > 1 and "ep" not in strategy.parallel_dims:
        return "cannot take expert parallelism (ep)"
    return None


def layout_refusal(strategy, layout) -> str | None:
    """Why ``strategy`` cannot take ``layout`` (its check_layout's line), if it cannot."""
    try:
        strategy.check_layout(layout)
    except UsageError as refused:
        return str(refused).split(": ", 1)[1]
    return None


@click.command("estimate-memory")
@click.option("--preset", type=click.Choice(tuple(PRESETS)), default="small", show_default=True)
@click.option("--world-size", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--tp", type=click.IntRange(min=1), default=1, show_default=True, help="tensor-parallel size"
)
@click.option(
    "--pp", type=click.IntRange(min=1), default=1, show_default=True, help="pipeline stages"
)
@click.option(
    "--ep",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="expert parallelism: the experts of an MoE preset split over ep ranks",
)
@click.option("--strategy", help="one strategy  [default: every registered one]")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True)
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="adamw", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.pass_context
def estimate_command(ctx, preset, world_size, tp, pp, ep, strategy, precision, optimizer, as_json):
    """Per-rank model-state memory (parameters, gradients, optimizer state) by strategy.

    Analytic bytes one rank holds at --world-size for the --preset's shape,
    with --tp tensor-parallel ranks and --pp pipeline stages (data parallel
    over the rest); activations and allocator overheads are not included.
    Strategies that cannot run that world size or layout say so. With an MoE
    preset and --ep the experts (parameters and their optimizer state) are
    split over ep ranks.
    """
    from rich.table import Table

    from mtb.config import TrainingConfig
    from mtb.console import print_wide
    from mtb.memory import format_size

    check_ep(preset, world_size, ep)
    training = TrainingConfig(precision=precision, optimizer=optimizer)
    rows = estimates(ctx.find_root().obj, preset, world_size, training, strategy, tp, pp, ep)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(
        title=f"model state per rank: preset {preset}, world size {world_size}, "
        f"layout {rows[0]['layout'] if rows else '-'}, {precision}, {optimizer}"
        + (f", ep {ep}" if ep > 1 else "")
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


def check_ep(preset: str, world_size: int, ep: int) -> None:
    """ep must divide the world size and the experts of the preset (one line otherwise)."""
    experts = PRESETS[preset].get("moe_experts", 0)
    if ep > 1 and (world_size % ep or not experts or experts % ep):
        raise UsageError(
            f"--ep: {ep} must divide --world-size {world_size} and the {experts} experts of "
            f"preset {preset!r}"
        )
