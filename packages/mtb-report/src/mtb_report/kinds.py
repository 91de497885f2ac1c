"""Tables for the result kinds other commands write (comm, tp, moe, fault, checkpoint, ...).

A kind's rows are the first top-level list of objects among ``ROW_FIELDS``;
its columns put the documented names (``PREFERRED``) first, then any other
scalar the rows carry. The summary table holds the document's top-level
scalars and those of its top-level objects (``moe.dropped``). A kind nobody
documented here still gets both: never a crash, never a dropped result.
"""

from collections import Counter

from mtb_report.formatting import cell
from mtb_report.model import Table

ROW_FIELDS = (
    "measurements",
    "tensors",
    "results",
    "rows",
    "checks",
    "scenarios",
    "cells",
    "runs",
)
PREFERRED = {
    "comm": (
        "operation",
        "placement",
        "mode",
        "dtype",
        "bytes",
        "time_us",
        "algbw_gbps",
        "busbw_gbps",
        "wrong_elements",
        "status",
    ),
    "tp": ("check", "dtype", "tensor", "max_abs_error", "max_rel_error", "tolerance", "ok"),
    "fault": ("scenario", "passed", "outcome", "expected", "detail"),
    "checkpoint": ("check", "step", "passed", "detail"),
    "profile": ("rank", "name", "total_ms", "count"),
    "matrix": ("strategy", "world_size", "precision", "status", "error"),
    "megatron": (
        "topology",
        "tp",
        "pp",
        "dp",
        "repeat",
        "status",
        "failure_kind",
        "elapsed_ms_per_iteration",
        "throughput_tflops_per_gpu",
        "lm_loss",
        "max_allocated_mb",
        "performance_valid",
        "ranks_checked",
        "mismatches",
        "ok",
    ),
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
SKIPPED = ("kind", "schema_version", "config", "provenance", "plugins", *ROW_FIELDS)


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


def flat(value) -> bool:
    """A scalar, or a list or object of scalars: short enough for one table cell."""
    items = value.values() if isinstance(value, dict) else value
    return is_scalar(value) or (isinstance(value, list | dict) and all(map(is_scalar, items)))


def summary_fields(document: dict) -> dict:
    """Top-level scalars, then one level into objects; a summary series shows its mean."""
    fields = {}
    for key, value in document.items():
        if key in SKIPPED:
            continue
        if isinstance(value, dict):
            for inner, item in value.items():
                item = item["mean"] if isinstance(item, dict) and "mean" in item else item
                if flat(item):
                    fields[f"{key}.{inner}"] = item
        elif is_scalar(value):
            fields[key] = value
    return fields


def summary_table(document: dict, title: str) -> Table:
    """What the document concludes, with the command that produced it."""
    fields = summary_fields(document)
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
