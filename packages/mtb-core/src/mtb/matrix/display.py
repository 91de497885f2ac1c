"""What a matrix prints: a progress bar on stderr, the plan and the summary on stdout."""

import contextlib

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from mtb.console import stderr
from mtb.memory import format_size

COUNTED = ("ok", "failed", "oom", "timeout", "skipped")


class CellProgress:
    """The current cell, cells done of all, elapsed time, ETA and the counts so far."""

    def __init__(self, bar: Progress, total: int):
        self.bar = bar
        self.counts = dict.fromkeys(COUNTED, 0)
        self.task = bar.add_task("matrix", total=total, counts=self._counts())

    def _counts(self) -> str:
        return " ".join(f"{status} {n}" for status, n in self.counts.items())

    def start(self, cell) -> None:
        self.bar.update(self.task, description=cell.id)

    def finish(self, cell, row: dict, reused: bool) -> None:
        self.counts[row["status"]] = self.counts.get(row["status"], 0) + 1
        how = "reused" if reused else f"{row.get('duration_s', 0):.1f} s"
        detail = f" ({row['error_class'] or row['error']})" if row["status"] != "ok" else ""
        self.bar.console.print(f"{cell.id}: {row['status']}{detail} [{how}]", markup=False)
        self.bar.update(self.task, advance=1, counts=self._counts())


@contextlib.contextmanager
def progress(total: int):
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[counts]}"),
    )
    with Progress(*columns, console=stderr, transient=True) as bar:
        yield CellProgress(bar, total)


def _percent(value) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f} %"


def _short(text: str | None, limit: int = 60) -> str:
    if not text:
        return ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _rate(value) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def plan_table(spec, plans: list, existing: dict) -> Table:
    """``mtb matrix show`` and ``--dry-run``: every cell, what will happen, the estimate."""
    table = Table(title=f"matrix {spec.name}: {len(plans)} cells of mtb {spec.command}")
    for column in ("cell", "ranks", "plan", "model state estimate", "result"):
        table.add_column(column, overflow="fold")
    for plan in plans:
        note = f" ({plan.note})" if plan.note else ""
        action = f"skip: {plan.skip}" if plan.skip else f"run{note}"
        estimate = format_size(plan.estimate["total"]) if plan.estimate else "n/a"
        done = existing.get(plan.cell.id)
        table.add_row(plan.cell.id, str(plan.cell.world_size), action, estimate, done or "-")
    return table


def summary_table(matrix: dict) -> Table:
    """The end of ``mtb matrix run``: one row per cell, memory measured beside estimated."""
    counts = ", ".join(f"{n} {s}" for s, n in matrix["counts"].items() if n)
    table = Table(title=f"matrix {matrix['name']}: {counts}")
    columns = (
        "cell",
        "status",
        "error class",
        "tokens/s",
        "model state",
        "estimate",
        "est. error",
        "peak RSS",
        "CUDA max alloc",
        "error",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in matrix["cells"]:
        rss = row.get("peak_rss_bytes") or row.get("process_peak_rss_bytes")
        table.add_row(
            row["cell"],
            row["status"],
            row.get("error_class") or "-",
            _rate(row.get("tokens_per_s")),
            format_size(row.get("model_state_bytes")),
            format_size(row.get("model_state_estimate_bytes")),
            _percent(row.get("model_state_estimate_error")),
            format_size(rss),
            format_size(row.get("cuda_max_allocated_bytes")),
            _short(row.get("error")),
        )
    return table


def jobs_table(out, states: dict) -> Table:
    """``mtb matrix status``: each cell's Slurm job, its state and reason, the result so far."""
    from mtb.matrix.runner import complete

    table = Table(title=f"Slurm jobs of the matrix in {out}")
    for column in ("cell", "job", "state", "reason", "requeued", "result"):
        table.add_column(column, overflow="fold")
    for cell, job in states.items():
        document = complete(out / "cells" / f"{cell}.json")
        result = document["status"] if document else "-"
        table.add_row(cell, job.job_id, job.state, job.reason or "-", str(job.restarts), result)
    return table


def live_jobs_table(states: dict, documents: dict) -> Table:
    """While a Slurm matrix runs: counts by Slurm state, then each job not yet collected."""
    from collections import Counter

    seen = Counter(job.state for job in states.values())
    counts = ", ".join(f"{n} {state.lower()}" for state, n in sorted(seen.items()))
    table = Table(title=f"Slurm jobs: {counts or 'none yet'}; {len(documents)} collected")
    for column in ("cell", "job", "state", "reason"):
        table.add_column(column, overflow="fold")
    for cell, job in states.items():
        if cell not in documents:
            table.add_row(cell, job.job_id, job.state, job.reason or "-")
    return table
