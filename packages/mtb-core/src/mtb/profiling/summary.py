"""Rank 0's profile summary: every rank's trace analysis combined.

Step times of synchronous data-parallel ranks come out nearly equal (fast
ranks wait for the slow one inside the collective), so the straggler is
measured on each rank's step time less its exposed communication, i.e. the
time the rank itself needed; the raw step-time spread is reported beside it.
Per-rank step and work times are medians over the profiled steps (one
noisy step does not name a straggler); breakdowns are means per step.
"""

import statistics
from collections import defaultdict

from mtb.metrics import max_across_ranks
from mtb.profiling.intervals import spread


def per_step(rank: dict, value: float) -> float:
    return value / rank["steps"] if rank["steps"] else 0.0


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def rank_row(rank: dict) -> dict:
    """One rank's figures: medians over its profiled steps, and means per step."""
    exposed = per_step(rank, rank["exposed_comm_ms"])
    return {
        "rank": rank["rank"],
        "step_ms": median(rank["step_ms"]),
        "breakdown_ms": {k: per_step(rank, v) for k, v in sorted(rank["ranges_ms"].items())},
        "compute_ms": per_step(rank, rank["compute_ms"]),
        "collective_ms": per_step(rank, rank["comm_ms"]),
        "exposed_comm_ms": exposed,
        "work_ms": median(rank["work_ms"]),
        "overlap": rank["overlap"],
    }


def undetermined(reason: str) -> dict:
    return {"status": "undetermined", "reason": reason}


def straggler(rows: list[dict]) -> dict:
    """Which rank needs the most time of its own per step, and by how much over the median.

    Flat (no nested objects), so report tables show it in one cell.
    """
    if any(row["work_ms"] is None for row in rows):
        return undetermined("a trace holds no ProfilerStep events to time steps by")
    work = spread([row["work_ms"] for row in rows])
    return {
        "status": "measured",
        "basis": "step time less exposed communication (work_ms)",
        "ratio": work["ratio"],
        "slowest_rank": rows[work["argmax"]]["rank"],
        **{f"work_ms_{k}": work[k] for k in ("min", "p50", "max")},
    }


def step_time(rows: list[dict]) -> dict:
    if any(row["step_ms"] is None for row in rows):
        return undetermined("a trace holds no ProfilerStep events to time steps by")
    times = spread([row["step_ms"] for row in rows])
    return {
        "status": "measured",
        "min": times["min"],
        "p50": times["p50"],
        "max": times["max"],
        "ratio": times["ratio"],
        "slowest_rank": rows[times["argmax"]]["rank"],
    }


def overall_overlap(ranks: list[dict]) -> dict:
    """Overlapped over total communication time, summed over every rank that has both."""
    measured = [r for r in ranks if r["overlap"]["status"] == "measured"]
    if not measured:
        return undetermined(ranks[0]["overlap"]["reason"])
    comm = sum(r["comm_ms"] for r in measured)
    return {
        "status": "measured",
        "ratio": sum(r["overlap_ms"] for r in measured) / comm,
        "ranks_measured": len(measured),
    }


def merged_ops(ranks: list[dict], key: str, measure: str, top: int) -> list[dict]:
    """An operator table summed over ranks, largest first."""
    table: dict = defaultdict(lambda: defaultdict(float))
    for rank in ranks:
        for row in rank[key]:
            for field, value in row.items():
                if field != "name" and isinstance(value, int | float):
                    table[row["name"]][field] += value
            table[row["name"]]["ranks"] += 1
    rows = [{"name": name, **values} for name, values in table.items()]
    for row in rows:
        row["count"], row["ranks"] = int(row["count"]), int(row["ranks"])
    return sorted(rows, key=lambda row: (-row[measure], row["name"]))[:top]


def overhead(active: list[int], baseline: list[list[float]] | None, profiled) -> dict:
    """Profiler overhead on the recorded steps: p50 step time with and without it.

    ``active`` indexes the measured steps the profiler recorded; ``baseline``
    and ``profiled`` hold every rank's measured step times; each step's time is
    the slowest rank's, as everywhere in mtb.
    """
    if baseline is None:
        return {"status": "not measured", "reason": "the unprofiled baseline was turned off"}
    base = statistics.median([max_across_ranks(baseline)[i] for i in active])
    prof = statistics.median([max_across_ranks(profiled)[i] for i in active])
    return {
        "status": "measured",
        "steps": len(active),
        "baseline_step_ms_p50": base,
        "profiled_step_ms_p50": prof,
        "overhead_ratio": prof / base - 1.0 if base > 0 else None,
    }


def report_rows(ranks: list[dict]) -> list[dict]:
    """Flat per-rank operator rows (rank, name, total_ms, count) for report tables."""
    rows = []
    for rank in ranks:
        for op in rank["top_cpu_ops"]:
            rows.append(
                {
                    "rank": rank["rank"],
                    "name": op["name"],
                    "total_ms": op["self_cpu_ms"],
                    "count": op["count"],
                    "measure": "self_cpu",
                }
            )
        for op in rank["top_device_ops"]:
            rows.append(
                {
                    "rank": rank["rank"],
                    "name": op["name"],
                    "total_ms": op["device_ms"],
                    "count": op["count"],
                    "measure": "device",
                }
            )
        for op in rank["comm_ops"]:
            rows.append(
                {
                    "rank": rank["rank"],
                    "name": op["name"],
                    "total_ms": op["total_ms"],
                    "count": op["count"],
                    "measure": f"comm_{op['timeline']}",
                }
            )
    return rows


def combine(ranks: list[dict], top: int) -> dict:
    """The cross-rank profile summary from every rank's :func:`mtb.profiling.trace.analyse`."""
    ranks = sorted(ranks, key=lambda r: r["rank"])
    rows = [rank_row(rank) for rank in ranks]
    device = any(rank["top_device_ops"] for rank in ranks)
    return {
        "timeline": ranks[0]["timeline"],
        "profiled_steps": ranks[0]["steps"],
        "per_rank": rows,
        "step_time_ms": step_time(rows),
        "straggler": straggler(rows),
        "collective_ms_per_rank": [row["collective_ms"] for row in rows],
        "overlap": overall_overlap(ranks),
        "top_cpu_ops": merged_ops(ranks, "top_cpu_ops", "self_cpu_ms", top),
        "top_device_ops": (
            merged_ops(ranks, "top_device_ops", "device_ms", top)
            if device
            else undetermined("the trace holds no device events (a CPU run)")
        ),
        "comm_ops": merged_ops(ranks, "comm_ops", "total_ms", top),
    }
