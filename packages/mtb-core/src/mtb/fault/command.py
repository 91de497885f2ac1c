"""``mtb fault smoke``: run the fault scenarios and write one ``fault`` result document."""

import tempfile
import time
from pathlib import Path

import click

from mtb.errors import RunFailed, UsageError
from mtb.fault.scenarios import SCENARIOS


@click.group("fault")
def fault_group():
    """Break real multi-process runs on purpose and check what the checkpoints survive."""


def _names(spec: str) -> list[str]:
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown or not names:
        raise UsageError(
            f"--scenarios: unknown {', '.join(unknown) or '(none given)'}; "
            f"choose from {','.join(SCENARIOS)}"
        )
    return names


def _check_strategy(pm, name: str) -> None:
    strategy = pm.registry("strategy").get(name)
    if strategy.max_world_size is not None and strategy.max_world_size < 2:
        raise UsageError(f"--strategy: {name!r} runs on one rank; the smokes need 2")


@fault_group.command("smoke")
@click.option(
    "--scenarios",
    default=",".join(SCENARIOS),
    show_default=True,
    help="comma-separated scenarios to run",
)
@click.option("--strategy", default="ddp", show_default=True, help="strategy of every run")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="folder for the runs and checkpoints (must be new or empty)  [default: a new temporary "
    "folder, kept]",
)
@click.option("--output", help="result JSON  [default: results/fault-<UTC time>.json]")
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=120.0,
    show_default=True,
    help="wall-clock limit of each launch in seconds",
)
@click.pass_obj
def smoke_command(pm, scenarios, strategy, workdir, output, timeout_s):
    """Run each fault scenario as real 2-rank runs and record pass or fail with evidence.

    Scenarios: nan, kill-during-save, config-mismatch, rank-crash,
    auto-recovery, launcher-kill, corrupt, retention, stale-steps, two-writers,
    disk-full (see docs/faults.md). Writes one JSON
    document (kind "fault") and prints a table; exits 1 when any scenario fails.
    """
    from mtb.console import stdout
    from mtb.documents import default_output
    from mtb.fault import report
    from mtb.fault.smoke import Smoke, run_scenario
    from mtb.output_paths import check_file
    from mtb.provenance import utc_now

    path = output or default_output("fault")
    check_file("--output", path)
    names = _names(scenarios)
    _check_strategy(pm, strategy)
    folder = _workdir(workdir)
    smoke = Smoke(folder, strategy, timeout_s, pm)
    started, clock = utc_now(), time.perf_counter()
    outcomes = [run_scenario(smoke, name, SCENARIOS[name]) for name in names]
    doc = report.document(smoke, outcomes, pm, started, time.perf_counter() - clock)
    report.write(doc, path)
    stdout.print(report.table(doc))
    click.echo(f"fault smoke written to {path} (runs in {folder})")
    if doc["status"] != "ok":
        failed = [o.name for o in outcomes if not o.passed]
        raise RunFailed(f"fault scenarios failed: {', '.join(failed)}")


def _workdir(path: str | None) -> Path:
    if path is None:
        return Path(tempfile.mkdtemp(prefix="mtb-fault-"))
    folder = Path(path)
    if folder.exists() and any(folder.iterdir()):
        raise UsageError(f"--workdir: {path} is not empty; the smoke needs a fresh folder")
    folder.mkdir(parents=True, exist_ok=True)
    return folder.resolve()
