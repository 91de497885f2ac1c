"""``mtb checkpoint``: list, inspect, verify and clean a run's checkpoints."""

import datetime as dt
import json
from pathlib import Path
from typing import Any

import click

from mtb.errors import RunFailed, UsageError


@click.group("checkpoint")
def checkpoint_group():
    """Inspect and maintain checkpoint directories (see docs/checkpoints.md)."""


def _directory(path: str) -> Path:
    directory = Path(path)
    if not directory.is_dir():
        raise UsageError(f"DIR: {path} is not a directory")
    return directory


def _state(entry) -> str:
    from mtb.checkpoint.metadata import CheckpointError, check_intact

    if entry.temporary:
        return "incomplete (temporary)"
    if entry.aside is not None:
        return f"moved aside ({entry.aside})"
    try:
        check_intact(entry.path)
    except CheckpointError as error:
        return "READY, damaged" if entry.ready else f"incomplete ({_why(error)})"
    return "READY"


def _why(error) -> str:
    return str(error).split(": ", 1)[-1]


def _age(seconds: float) -> str:
    return str(dt.timedelta(seconds=int(seconds)))


@checkpoint_group.command("list")
@click.argument("directory", metavar="DIR")
@click.option("--json", "as_json", is_flag=True, help="print a JSON list instead of a table")
def list_command(directory, as_json):
    """Every checkpoint in DIR: step, READY or incomplete, size, age, and which `latest` names."""
    from rich.table import Table

    from mtb.checkpoint import layout
    from mtb.console import stdout

    root = _directory(directory)
    latest = layout.read_latest(root)
    rows: list[dict[str, Any]] = [
        {
            "name": entry.path.name,
            "step": entry.step,
            "state": _state(entry),
            "bytes": entry.size_bytes(),
            "age_s": round(entry.age_s(), 1),
            "latest": entry.path.name == latest,
        }
        for entry in layout.scan(root)
    ]
    if as_json:
        click.echo(json.dumps({"directory": str(root), "latest": latest, "checkpoints": rows}))
        return
    table = Table(title=f"{root}: latest -> {latest or 'none'}")
    for column in ("checkpoint", "step", "state", "size", "age", "latest"):
        table.add_column(column, justify="right" if column in ("step", "size") else "left")
    for row in rows:
        table.add_row(
            row["name"],
            str(row["step"]),
            row["state"],
            f"{row['bytes'] / 2**20:,.2f} MiB",
            _age(row["age_s"]),
            "<- latest" if row["latest"] else "",
        )
    stdout.print(table)


@checkpoint_group.command("inspect")
@click.argument("path", metavar="PATH")
def inspect_command(path):
    """Print a checkpoint's metadata.json, with whether its files (and READY's digest of
    metadata.json) still match it and whether this mtb can resume it."""
    from mtb.checkpoint import formats, layout
    from mtb.checkpoint import metadata as meta

    step_dir = Path(path)
    if not step_dir.is_dir():
        raise UsageError(f"PATH: {path} is not a checkpoint directory")
    document = meta.read(step_dir)
    problems = meta.file_problems(step_dir, document)
    problems += filter(None, [meta.metadata_problem(step_dir, document)])
    report = {
        "path": str(step_dir),
        "ready": (step_dir / layout.READY).is_file(),
        "files_match": not problems,
        "problems": problems,
        "resume_refusal": formats.resume_refusal(document),
        "metadata": document,
    }
    click.echo(json.dumps(report, indent=2))


@checkpoint_group.command("verify")
@click.argument("left", metavar="LEFT")
@click.argument("right", metavar="[RIGHT]", required=False)
@click.option(
    "--output", "-o", default="checkpoint-verify.json", show_default=True, help="diagnosis JSON"
)
@click.option("--device", type=click.Choice(("auto", "cpu", "cuda")), default="auto")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True)
@click.pass_obj
def verify_command(pm, left, right, output, device, timeout_s):
    """Check LEFT against its own digests; with RIGHT, compare the two checkpoints' states.

    One checkpoint: READY, and every file's size and SHA256 as metadata.json
    records them (nothing is loaded). Two: load each at its saved world size
    and compare model, optimizer, scheduler, train state and each rank's RNG.
    Writes a JSON diagnosis; exits 1 naming what is damaged or differs.
    """
    from mtb.checkpoint.verify import self_check
    from mtb.checkpoint_compare import diagnosis
    from mtb.output_paths import check_file
    from mtb.reporting import write_atomic

    sides = {"LEFT": left, "RIGHT": right} if right else {"LEFT": left}
    for name, path in sides.items():
        if not Path(path).is_dir():
            raise UsageError(f"{name}: {path} is not a directory (give a step_N checkpoint)")
    check_file("--output", output)
    if right is None:
        document = self_check(Path(left))
    else:
        document = diagnosis(Path(left), Path(right), pm, device, timeout_s)
    write_atomic(output, json.dumps(document, indent=2) + "\n")
    click.echo(f"diagnosis written to {output}")
    if document["status"] != "ok":
        raise RunFailed(document["error"])
    click.echo(document["verdict"])


@checkpoint_group.command("clean")
@click.argument("directory", metavar="DIR")
@click.option("--dry-run", is_flag=True, help="only list what would be removed")
def clean_command(directory, dry_run):
    """Remove what no run can resume from, and repair `latest`.

    Removes temporary directories, directories a resume moved aside, step
    directories without READY or whose files no longer match metadata.json,
    and leftover `.latest.*.tmp` files; points `latest` at the newest intact
    READY checkpoint (or removes it). Refused while a run holds DIR's lock.
    """
    from mtb.checkpoint import lock, recovery

    root = _directory(directory)
    with lock.held(root, "mtb checkpoint clean"):
        plan = recovery.plan_clean(root)
        if not dry_run:
            recovery.apply_clean(root, plan)
    verb = "would remove" if dry_run else "removed"
    for path, why in plan.doomed:
        click.echo(f"{verb} {path} ({why})")
    if plan.latest:
        click.echo(f"{'would repair' if dry_run else 'repaired'} {plan.latest}")
    click.echo(f"{verb} {len(plan.doomed)} unusable item(s)")
