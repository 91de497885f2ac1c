"""``mtb matrix run|show|presets``: declarative sweeps, each cell its own process."""

from pathlib import Path

import click

from mtb.errors import UsageError


def _spec(path: str | None, preset: str | None, overrides: tuple[str, ...], executor=None):
    import attrs

    from mtb.matrix import spec as spec_mod

    if bool(path) == bool(preset):
        raise UsageError("matrix: give a MATRIX.toml file or --preset NAME (one of them)")
    spec = spec_mod.load_preset(preset) if preset else spec_mod.load(str(path))
    spec = spec_mod.with_overrides(spec, [spec_mod.parse_override(o) for o in overrides])
    return attrs.evolve(spec, executor=executor) if executor else spec


def _plans(ctx, spec, max_ranks):
    from mtb.matrix.cells import expand
    from mtb.matrix.plan import Machine, this_machine
    from mtb.matrix.session import plans

    root = ctx.find_root()
    if spec.executor != "slurm":
        return plans(spec, expand(spec), root.command, root.obj, this_machine(max_ranks))
    from mtb.matrix.slurm_jobs import cell_settings

    planned = plans(spec, expand(spec), root.command, root.obj, Machine(0, 0, cluster=True))
    cell_settings(spec, [plan for plan in planned if not plan.skip])  # one line, before anything
    return planned


def _out(spec, output_dir: str | None) -> Path:
    return Path(output_dir or Path("results") / f"matrix-{spec.name}")


def _existing(plans, out: Path) -> dict:
    from mtb.matrix.runner import complete
    from mtb.matrix.session import result_path

    found = {}
    for plan in plans:
        document = complete(result_path(out, plan.cell))
        if document:
            found[plan.cell.id] = document["status"]
    return found


def source_options(command):
    options = (
        click.argument("matrix_file", required=False, type=click.Path(dir_okay=False)),
        click.option("--preset", help="a matrix shipped with mtb (see `mtb matrix presets`)"),
        click.option(
            "--set",
            "overrides",
            multiple=True,
            metavar="KEY=VALUE",
            help="lay an option over every cell (fixes an axis of that name); repeatable",
        ),
        click.option(
            "--output-dir",
            help="where cell results, logs, matrix.json and report.md go  "
            "[default: results/matrix-<name>]",
        ),
        click.option(
            "--max-ranks",
            type=click.IntRange(min=1),
            help="ranks this machine may run  [default: CPU cores, or CUDA devices]",
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


@click.group("matrix")
def matrix_group():
    """Declarative sweeps of mtb commands: each cell its own process, resumable."""


@matrix_group.command("run")
@source_options
@click.option("--resume", is_flag=True, help="reuse complete cell results, run the missing ones")
@click.option("--dry-run", is_flag=True, help="print the plan and exit without running")
@click.option(
    "--executor",
    type=click.Choice(("local", "slurm")),
    help="local: cells one after another here; slurm: each cell a Slurm job  "
    "[default: the matrix's executor key, else local]",
)
@click.option(
    "--resubmit-failed",
    is_flag=True,
    help="slurm, with --resume: submit again the cells whose result is not ok",
)
@click.option("--detach", is_flag=True, help="slurm: exit once submitted (re-attach with --resume)")
@click.option(
    "--poll-s",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="slurm: seconds between reads of the jobs' states",
)
@click.pass_context
def run_command(
    ctx, /, matrix_file, preset, overrides, output_dir, max_ranks, resume, dry_run, **how
):
    """Run every cell of a matrix (a TOML file, or --preset NAME).

    Each cell runs `mtb COMMAND ...` in its own process under the matrix's
    timeout; a failure, out-of-memory or timeout is recorded with its status
    and error class and the matrix goes on. Cells this machine cannot host
    are skipped with the reason. Writes cells/<id>.json, logs/<id>.log and
    matrix.json under --output-dir, prints a summary table and, when a
    markdown reporter is installed (mtb-report), writes report.md. Exit 0
    when every cell has a result and none failed unexpectedly, 1 otherwise.

    With --executor slurm each cell is one Slurm job (docs/slurm.md): the
    jobs are recorded under slurm/, so --resume re-attaches after the
    submitter died; `mtb matrix status` and `mtb matrix cancel` act on them.
    """
    from mtb.console import print_wide
    from mtb.errors import RunFailed
    from mtb.matrix import display

    spec = _spec(matrix_file, preset, overrides, how.pop("executor"))
    plans = _plans(ctx, spec, max_ranks)
    out = _out(spec, output_dir)
    if dry_run:
        print_wide(display.plan_table(spec, plans, _existing(plans, out)))
        return
    matrix, report = _execute(ctx, spec, plans, out, resume, **how)
    if matrix is None:
        click.echo(f"jobs submitted; watch with: mtb matrix status {out}")
        return
    print_wide(display.summary_table(matrix))
    click.echo(f"matrix written to {out / 'matrix.json'}")
    if report:
        click.echo(f"report written to {report}")
    if matrix["counts"]["failed"]:
        raise RunFailed(f"{matrix['counts']['failed']} cell(s) failed; see {out / 'logs'}")


def _execute(ctx, spec, plans, out: Path, resume: bool, resubmit_failed, detach, poll_s):
    """The matrix run by its executor: (matrix document, report path); None when detached."""
    from mtb.matrix import display, session, slurm_session
    from mtb.output_paths import check_directory

    if spec.executor != "slurm" and (resubmit_failed or detach):
        flag = "--resubmit-failed" if resubmit_failed else "--detach"
        raise UsageError(f"{flag}: only with --executor slurm")
    check_directory("--output-dir", out)
    session.check_output_dir(out, resume)
    pm = ctx.find_root().obj
    if spec.executor == "slurm":
        return slurm_session.run(
            spec, plans, out, pm, resubmit_failed=resubmit_failed, detach=detach, poll_s=poll_s
        )
    with display.progress(len(plans)) as progress:
        return session.run(spec, plans, out, pm, progress)


@matrix_group.command("show")
@source_options
@click.pass_context
def show_command(ctx, matrix_file, preset, overrides, output_dir, max_ranks):
    """List a matrix's cells: what runs here, what is skipped and why, the memory estimate."""
    from mtb.console import print_wide
    from mtb.matrix import display

    spec = _spec(matrix_file, preset, overrides)
    plans = _plans(ctx, spec, max_ranks)
    print_wide(display.plan_table(spec, plans, _existing(plans, _out(spec, output_dir))))


@matrix_group.command("status")
@click.argument("output_dir", type=click.Path(file_okay=False, exists=True))
def status_command(output_dir):
    """The Slurm jobs of a matrix: each cell's job, Slurm's state and reason, its result."""
    from mtb.console import print_wide
    from mtb.matrix import display, slurm_jobs

    print_wide(
        display.jobs_table(Path(output_dir), slurm_jobs.job_states(Path(output_dir), detailed=True))
    )


@matrix_group.command("cancel")
@click.argument("output_dir", type=click.Path(file_okay=False, exists=True))
def cancel_command(output_dir):
    """scancel every pending or running job of a matrix and wait until each has ended.

    The cells keep no result; `mtb matrix run --resume` submits them again.
    """
    from mtb.matrix import slurm_jobs

    cancelled = slurm_jobs.cancel(Path(output_dir))
    click.echo(f"cancelled {len(cancelled)} job(s){': ' if cancelled else ''}{' '.join(cancelled)}")


@matrix_group.command("presets")
def presets_command():
    """List the matrices shipped with mtb and what each measures."""
    from mtb.matrix.spec import load_preset, preset_names

    for name in preset_names():
        click.echo(f"{name}: {load_preset(name).description}")
