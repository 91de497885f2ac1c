"""``mtb slurm script``: the batch script of one ``mtb run`` on Slurm, as the matrix submits it."""

import click

from mtb.errors import UsageError


def _settings_options(command):
    """One option per job resource of :class:`mtb.slurm.settings.SlurmSettings`."""
    import attrs

    from mtb.slurm.settings import SlurmSettings

    for field in reversed(attrs.fields(SlurmSettings)):
        kind = int if field.type in (int, "int", int | None, "int | None") else str
        flag = "--" + field.name.replace("_", "-")
        default = None if field.name == "python" else field.default
        command = click.option(
            flag, field.name, type=kind, default=default, help=field.metadata["help"]
        )(command)
    return command


@click.group("slurm")
def slurm_group():
    """Slurm: the batch script mtb submits (see also mtb matrix run --executor slurm)."""


@slurm_group.command(
    "script", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.option(
    "--nodes",
    type=click.IntRange(1, 4096),
    default=2,
    show_default=True,
    help="nodes of the job; one mtb agent each",
)
@click.option(
    "--nproc-per-node",
    type=click.IntRange(1, 1024),
    default=1,
    show_default=True,
    help="ranks each node starts",
)
@click.option(
    "--device",
    type=click.Choice(("auto", "cpu", "cuda")),
    default="auto",
    show_default=True,
    help="device of the ranks (cuda adds --gpus-per-node)",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=1800.0,
    show_default=True,
    help="the run's own --timeout, in s (the time limit adds 2 min)",
)
@click.option(
    "--output",
    "result",
    default="results/mtb-run-%j.json",
    show_default=True,
    help="the result file (%j: the job id)",
)
@_settings_options
@click.argument("run_args", nargs=-1, type=click.UNPROCESSED)
def script_command(nodes, nproc_per_node, device, timeout_s, result, run_args, **resources):
    """Print the sbatch script of `mtb run RUN_ARGS...` on --nodes nodes.

    Give mtb run's own flags after `--`, e.g.
    `mtb slurm script --nodes 4 --nproc-per-node 8 --device cuda -- --strategy fsdp
    --preset small > job.sbatch`. With --checkpoint-dir among them the job
    saves on Slurm's warning signal and requeues itself (docs/slurm.md).
    """
    from mtb.config import ConfigError
    from mtb.slurm import script, settings

    given = {k: v for k, v in resources.items() if v is not None}
    try:
        chosen = settings.from_table(given, "slurm")
    except ConfigError as error:
        flag = "--" + error.field.split(".", 1)[1].replace("_", "-")
        raise UsageError(f"{flag}: {error.message}") from None
    flags = {arg.split("=", 1)[0] for arg in run_args}
    for owned in ("--output", "--nnodes", "--nproc-per-node", "--node-rank", "--timeout"):
        if owned in flags:
            raise UsageError(f"{owned}: set by mtb slurm script itself, not among the run flags")
    argv = (
        *run_args,
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(nproc_per_node),
        "--device",
        device,
        "--timeout",
        f"{timeout_s:g}",
    )
    job = script.Job(
        name="mtb-run",
        command=("run",),
        argv=argv,
        nodes=nodes,
        nproc_per_node=nproc_per_node,
        device=device,
        timeout_s=timeout_s,
        settings=chosen,
        result=result,
        log_stem="mtb-run-%j",
        log_dir=".",
        checkpoints="--checkpoint-dir" in flags,
    )
    click.echo(script.render(job), nl=False)
