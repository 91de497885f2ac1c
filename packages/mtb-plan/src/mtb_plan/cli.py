"""``mtb plan``: the ranked table of every layout, ``--verify K`` to run some, and ``calibrate``.

torch is imported only when a command runs (the profile checks and the
layout checks need none; the runtime checks import the model lazily).
"""

import click

from mtb.api import UsageError
from mtb_plan.verify import TIMING_TRIALS
from mtb_plan.workload import PRECISIONS

OPTIMIZERS = ("adamw", "sgd")


@click.group("plan", invoke_without_command=True)
@click.option(
    "--profile",
    "profile_path",
    metavar="PROFILE.toml",
    help="device profile (`mtb plan calibrate` writes one)  [required without a sub-command]",
)
@click.option("--preset", default="small", show_default=True, help="model preset of the workload")
@click.option(
    "--global-batch",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="sequences per optimizer step, across every data-parallel rank",
)
@click.option("--precision", type=click.Choice(PRECISIONS), help="[default: the profile's]")
@click.option("--optimizer", type=click.Choice(OPTIMIZERS), default="adamw", show_default=True)
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--devices-per-node",
    type=click.IntRange(min=1),
    help="ranks per node  [default: the profile's devices_per_node]",
)
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, help="rows shown")
@click.option("--output", help="plan JSON path  [default: results/plan-<UTC time>.json]")
@click.option(
    "--verify",
    "verify_top",
    type=click.IntRange(min=1),
    help="run the K best layouts and a few spread through the ranking, and report the error",
)
@click.option(
    "--spread",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="with --verify: layouts spread through the rest of the ranking",
)
@click.option(
    "--verify-layout",
    multiple=True,
    metavar="LABEL",
    help="with --verify: run this layout too (a label of the table; repeatable)",
)
@click.option(
    "--steps",
    type=click.IntRange(min=2),
    default=8,
    show_default=True,
    help="--verify: steps per run",
)
@click.option(
    "--warmup-steps",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="--verify: warmup steps",
)
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=TIMING_TRIALS,
    show_default=True,
    help="--verify: timing runs of each layout, the fastest median kept (noise only slows)",
)
@click.option(
    "--verify-dir",
    help="--verify: folder of its matrices (timing, and memory on CPU)  "
    "[default: results/plan-verify-<UTC time>]",
)
@click.option(
    "--executor",
    type=click.Choice(("local", "slurm")),
    default="local",
    show_default=True,
    help="--verify: where the runs execute (the matrix runner's executors)",
)
@click.option(
    "--cell-timeout",
    type=click.FloatRange(min=1),
    default=900,
    show_default=True,
    help="--verify: seconds per run",
)
@click.pass_context
def plan_command(ctx, profile_path, **options):
    """Predict step time and memory of every parallel layout, ranked; --verify K runs some.

    From a device profile (measured by `mtb plan calibrate`, or written by hand
    for hardware out of reach) and a workload (--preset, --global-batch,
    --precision, --optimizer) on --nodes x --devices-per-node ranks: every
    layout the registered strategies can take (data parallel, FSDP/HSDP,
    ZeRO, tensor, sequence, pipeline, context and expert parallelism,
    micro-batch size, activation checkpointing), each checked as `mtb run`
    checks it, with predicted step time, tokens/s, MFU, peak memory per rank
    and the dominant cost. Writes a result document (kind plan) that
    `mtb report` renders with plots. See docs/planning.md.
    """
    if ctx.invoked_subcommand is not None:
        return
    if not profile_path:
        raise UsageError(
            "--profile: required; measure one with `mtb plan calibrate --output PROFILE.toml`"
        )
    from mtb_plan.command import run_plan

    run_plan(ctx.find_root().obj, profile_path, options)


def _attach_calibrate() -> None:
    from mtb_plan.calibrate_cli import calibrate_command

    plan_command.add_command(calibrate_command, "calibrate")


_attach_calibrate()
