"""Tables for the result kinds other commands write (comm, tp, moe, fault, checkpoint, ...).

A kind's rows are the first top-level list of objects among ``ROW_FIELDS``;
its columns put the documented names (``PREFERRED``) first, then any other
scalar the rows carry. A kind nobody documented here still gets a summary
table and its rows: never a crash, never a dropped result.
"""

from collections import Counter

from mtb_report.formatting import cell
from mtb_report.model import Table

ROW_FIELDS = ("results", "rows", "checks", "scenarios", "cells", "runs", "experts", "ranks")
PREFERRED = {
    "comm": ("operation", "size_bytes", "time_us", "algbw_gbps", "busbw_gbps", "correct"),
    "tp": ("check", "mode", "tp_size", "max_abs_diff", "tolerance", "passed"),
    "moe": ("check", "experts", "top_k", "max_abs_diff", "tolerance", "passed"),
    "fault": ("scenario", "passed", "outcome", "expected", "detail"),
    "checkpoint": ("check", "step", "passed", "detail"),
    "profile": ("rank", "name", "total_ms", "count"),
    "matrix": ("strategy", "world_size", "precision", "status", "error"),
}
TITLES = {
    "comm": "Collectives",
    "tp": "Tensor/sequence-parallel correctness",
    "moe": "MoE correctness",
    "fault": "Fault-smoke outcomes",
    "checkpoint": "Checkpoint verification",
    "profile": "Profile summary",
    "matrix": "Matrix",
    "doctor": "Doctor",
    "megatron": "Megatron",
}
SKIPPED = ("kind", "schema_version", "config", "provenance", "plugins")


def is_scalar(value) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def rows_of(document: dict) -> list[dict]:
    for name in ROW_FIELDS:
        value = document.get(name)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return value
    return []


def columns_of(kind: str, rows: list[dict]) -> tuple[str, ...]:
    seen = [c for c in PREFERRED.get(kind, ()) if any(c in row for row in rows)]
    for row in rows:
        seen += [k for k, v in row.items() if k not in seen and is_scalar(v)]
    return tuple(seen)


def summary_table(document: dict, title: str) -> Table:
    """Top-level scalars and the scalars of ``summary``: what the document concludes."""
    fields = {k: v for k, v in document.items() if k not in SKIPPED and is_scalar(v)}
    summary = document.get("summary")
    if isinstance(summary, dict):
        fields.update({k: v for k, v in summary.items() if is_scalar(v)})
    command = (document.get("provenance") or {}).get("command")
    notes = [f"command: `{command}`"] if command else []
    return Table(title, ("field", "value"), [[k, cell(v)] for k, v in fields.items()], notes)


def status_counts(rows: list[dict]) -> Table | None:
    counts = Counter(str(row["status"]) for row in rows if "status" in row)
    if not counts:
        return None
    return Table(
        "Status counts", ("status", "count"), [[s, str(n)] for s, n in sorted(counts.items())]
    )


def kind_tables(document: dict) -> list[Table]:
    """A summary table, the rows table, and status counts where rows carry a status."""
    kind = document["kind"]
    title = TITLES.get(kind, f"Kind '{kind}'")
    tables = [summary_table(document, title)]
    rows = rows_of(document)
    if rows:
        columns = columns_of(kind, rows)
        body = [[cell(row.get(c)) for c in columns] for row in rows]
        tables.append(Table(f"{title}: rows", columns, body))
        counts = status_counts(rows)
        if counts:
            tables.append(counts)
    return tables
