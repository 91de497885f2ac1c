"""The click commands: ``mtb comm``, ``mtb tp check|mlp|sequence``, ``mtb moe route``.

Options are generated from the config classes' fields (help, choices,
defaults) with core's option builder, and the launcher options are core's
own ``[launch]`` options, so ``--nproc-per-node``, ``--device``,
``--backend`` and ``--timeout`` mean what they mean for ``mtb run``.
torch is imported only when a command runs.
"""

import attrs
import click

from mtb.api import LaunchConfig, launch_options, option_for, split_launch
from mtb_comm import config as cfg


def _options(cls, skip=()):
    """One option per documented field of ``cls`` plus core's launch options."""
    fields = [f for f in attrs.fields(cls) if f.metadata.get("help") and f.name not in skip]

    def decorate(command):
        command = launch_options(command)  # listed after the command's own options
        for field in reversed(fields):
            command = option_for(None, field)(command)
        return command

    return decorate


def _build(cls, params: dict, **values):
    """The config from the flags given (None: not given, the default applies)."""
    launch, given = split_launch(params)
    return cls(**values, **given, launch=LaunchConfig(**launch))


def _execute(kind: str, spec, measure, build, render):
    from mtb.api import get_plugin_manager
    from mtb_comm import jobs

    pm = click.get_current_context().find_root().obj or get_plugin_manager()
    jobs.execute(kind, jobs.with_output(spec, kind), pm, measure, build, render)


@click.command("comm")
@click.option(
    "--operations",
    default=",".join(cfg.OPERATIONS),
    show_default=True,
    help="comma-separated collectives to measure; send_recv (a ring of point-to-point "
    "transfers) only when named",
)
@click.option(
    "--sizes",
    default="1K,1M,16M",
    show_default=True,
    help="comma-separated buffer sizes in bytes (K, M, G: powers of 1024)",
)
@_options(cfg.CommConfig)
def comm_command(operations, sizes, **params):
    """Collective bandwidth with nccl-tests conventions, every result checked.

    For each operation, size and placement (out-of-place, in-place): time per
    iteration (each rank's mean, max and mean across ranks; min/p50/max over
    iterations), algbw and busbw, and the count of wrong elements. Writes one
    JSON result (kind comm); exits 1 when any element is wrong.
    """
    from mtb_comm import comm_bench, summaries, tables
    from mtb_comm.bandwidth import size_notices

    spec = _build(
        cfg.CommConfig,
        params,
        operations=cfg.parse_list("operations", operations, cfg.OPERATIONS + cfg.EXTRA_OPERATIONS),
        sizes_bytes=cfg.parse_sizes(sizes),
    )
    itemsize = comm_bench.torch_dtype(spec.dtype).itemsize
    group = spec.group_size or spec.launch.world_size
    for line in size_notices(spec.operations, spec.sizes_bytes, spec.dtype, itemsize, group):
        click.echo(line, err=True)
    _execute("comm", spec, comm_bench.measure, summaries.build_comm, tables.comm_table)


@click.group("tp")
def tp_group():
    """Tensor- and sequence-parallel layers checked against a single-device reference.

    What TP, SP and PP split and why: docs/parallelism.md.
    """


def _tp_command(check: str, summary: str):
    @click.command(check, help=summary)
    @click.option(
        "--dtypes",
        default="float32,bfloat16",
        show_default=True,
        help="comma-separated dtypes, each checked under its tolerance",
    )
    @_options(cfg.TpConfig, skip=("check",))
    def command(dtypes, **params):
        from mtb_comm import summaries, tables, tp_checks

        spec = _build(
            cfg.TpConfig,
            params,
            check=check,
            dtypes=cfg.parse_list("dtypes", dtypes, tuple(tp_checks.TOLERANCES)),
        )
        _execute("tp", spec, tp_checks.measure, summaries.build_tp, tables.tp_table)

    return command


TP_HELP = {
    "check": "ColumnParallelLinear (gathered output) and RowParallelLinear (split input).",
    "mlp": "Tensor-parallel MLP: column, GELU, row; one all-reduce forward, one backward.",
    "sequence": "Sequence parallelism: LayerNorm on sequence shards, all-gather before "
    "the column layer, reduce-scatter after the row layer.",
}
TP_TAIL = (
    "\n\nCompares output, input gradient and weight gradients with a single-device "
    "reference from the same seed (max absolute and relative error per tensor), counts "
    "the collectives issued, writes one JSON result (kind tp) and exits 1 when a tensor "
    "is out of tolerance or the collectives differ from the layout's."
)
for _check in cfg.TP_CHECKS:
    tp_group.add_command(_tp_command(_check, TP_HELP[_check] + TP_TAIL))


@click.group("moe")
def moe_group():
    """Mixture-of-experts routing and expert-parallel all_to_all dispatch.

    Dispatch, combine, capacity and imbalance explained: docs/moe.md.
    """


@moe_group.command("route")
@_options(cfg.MoeConfig)
def moe_route_command(**params):
    """Top-1/top-2 gating with capacity, drops and imbalance; dispatch and combine.

    Routes each rank's tokens (softmax gating, capacity = capacity_factor x
    tokens x k / experts), reports tokens per expert, drops, imbalance
    (max/mean) and the Switch load-balancing loss, dispatches the kept tokens
    to the experts' ranks with all_to_all and combines them back, timing both,
    and checks the output against a one-process reference of the same
    routing. Writes one JSON result (kind moe); exits 1 on a mismatch.
    """
    from mtb_comm import moe_dispatch, summaries, tables

    spec = _build(cfg.MoeConfig, params)
    _execute("moe", spec, moe_dispatch.measure, summaries.build_moe, tables.moe_table)


COMMANDS = (comm_command, tp_group, moe_group)
