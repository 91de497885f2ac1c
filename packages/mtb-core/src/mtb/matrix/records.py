"""The matrix document: one row per cell, measured memory beside the analytic estimate.

Rows keep scalars only (what mtb-report tabulates); the cell's own result
document, wherever it came from, is the file the row names.
"""

from collections import Counter

import attrs

from mtb.documents import result_document
from mtb.results import STATUSES, estimate_error


def _mean(summary: dict, key: str):
    value = summary.get(key)
    return value.get("mean") if isinstance(value, dict) else None


def row(plan, document: dict, result: str, **run) -> dict:
    """A cell's row from its plan, its result document and how its process ran."""
    cell, options = plan.cell, plan.cell.options
    summary = document.get("summary") or {}
    measured = _mean(summary, "model_state_bytes_per_rank")
    estimate = plan.estimate["total"] if plan.estimate else None
    config = plan.config
    return {
        "cell": cell.id,
        "repeat": cell.repeat,
        "strategy": options.get("strategy", "single" if config else None),
        "world_size": cell.world_size,
        "preset": config.preset if config else options.get("preset"),
        "precision": config.training.precision if config else options.get("precision"),
        "grad_accum_steps": config.training.grad_accum_steps if config else None,
        "memory_limit_per_rank": options.get("memory_limit_per_rank"),
        "status": document.get("status"),
        "error_class": document.get("error_class"),
        "error": document.get("error"),
        "tokens_per_s": _mean(summary, "tokens_per_s"),
        "step_ms": _mean(summary, "step_ms"),
        "model_state_bytes": measured,
        "model_state_estimate_bytes": estimate,
        "model_state_estimate_error": estimate_error(measured, estimate) if estimate else None,
        "peak_rss_bytes": _mean(summary, "peak_rss_bytes"),
        "cuda_max_allocated_bytes": _mean(summary, "cuda_max_allocated_bytes"),
        "result": result,
        **run,
    }


def skipped_row(plan) -> dict:
    cell = plan.cell
    return {
        "cell": cell.id,
        "repeat": cell.repeat,
        "strategy": cell.options.get("strategy"),
        "world_size": cell.world_size,
        "preset": cell.options.get("preset"),
        "status": "skipped",
        "error_class": None,
        "error": plan.skip,
        "result": None,
    }


def counts(rows: list[dict]) -> dict:
    seen = Counter(r["status"] for r in rows)
    return {status: seen.get(status, 0) for status in STATUSES}


def document(spec, rows: list[dict], total: int, provenance: dict, plugins: list) -> dict:
    """The matrix document; status ``ok`` once every cell has a row, else ``failed``."""
    done = len(rows) == total
    return result_document(
        "matrix",
        status="ok" if done else "failed",
        error=None if done else f"interrupted after {len(rows)} of {total} cells",
        name=spec.name,
        description=spec.description,
        command=spec.command,
        spec=attrs.asdict(spec),
        counts=counts(rows),
        cells=rows,
        plugins=plugins,
        provenance=provenance,
    )
