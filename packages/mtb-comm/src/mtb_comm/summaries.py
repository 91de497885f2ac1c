"""Rank 0: every rank's raw records into the fields of a result document.

Each ``build_*`` returns status, error and the kind's records; status is
``failed`` when a correctness check failed (the command then exits 1).
"""

import statistics

from mtb_comm.bandwidth import algbw_gbps, busbw_gbps
from mtb_comm.config import group_of
from mtb_comm.moe_routing import imbalance
from mtb_comm.results import CommMeasurement, MoeRanks, TensorCheck


def _verdict(failures: list[str]) -> dict:
    if not failures:
        return {"status": "ok", "error": None}
    return {"status": "failed", "error": "; ".join(failures)}


def _received_imbalance(splits) -> float | None:
    """max / mean elements received per rank (None outside all_to_all)."""
    if splits is None:
        return None
    return imbalance([sum(row[dst] for row in splits) for dst in range(len(splits))])


def reduce_case(records: list[dict], dtype: str, itemsize: int, group: int) -> CommMeasurement:
    """One case as every rank measured it (``records`` ordered by rank), over groups of
    ``group`` ranks (the bus factor's n)."""
    first = records[0]
    common = {
        "operation": first["operation"],
        "placement": first["placement"],
        "mode": first["mode"],
        "dtype": dtype,
        "bytes": first["elements"] * itemsize,
        "elements": first["elements"],
        "splits": first["splits"],
        "imbalance": _received_imbalance(first["splits"]),
    }
    if first["skipped"]:
        return CommMeasurement(**common, status="skipped", reason=first["skipped"])
    means = [statistics.fmean(r["times_us"]) for r in records]
    per_iteration = [max(ts) for ts in zip(*(r["times_us"] for r in records), strict=True)]
    time_us = max(means)
    wrong = sum(r["wrong_elements"] for r in records)
    return CommMeasurement(
        **common,
        status="ok" if wrong == 0 else "failed",
        reason=f"{wrong} wrong elements" if wrong else None,
        time_us=time_us,
        time_avg_us=statistics.fmean(means),
        time_min_us=min(per_iteration),
        time_p50_us=statistics.median(per_iteration),
        time_max_us=max(per_iteration),
        algbw_gbps=algbw_gbps(common["bytes"], time_us),
        busbw_gbps=busbw_gbps(first["operation"], common["bytes"], time_us, group),
        per_rank_time_us=means,
        slowest_rank=means.index(time_us),
        wrong_elements=wrong,
        checked_elements=sum(r["checked_elements"] for r in records),
    )


def build_comm(config, per_rank: list[list[dict]]) -> dict:
    import torch

    itemsize = getattr(torch, config.dtype).itemsize
    cases = zip(*per_rank, strict=True)
    group = group_of(config, len(per_rank))
    measurements = [reduce_case(list(case), config.dtype, itemsize, group) for case in cases]
    failures = [
        f"{m.operation} {m.placement} {m.bytes} B: {m.reason}"
        for m in measurements
        if m.status == "failed"
    ]
    return {**_verdict(failures), "group_size": group, "measurements": measurements}


def build_tp(config, per_rank: list[list[dict]]) -> dict:
    from mtb_comm.tp_checks import EXPECTED_COLLECTIVES, TOLERANCES

    tensors, collectives, failures = [], {}, []
    for case in zip(*per_rank, strict=True):
        first = case[0]
        label = f"{first['case']}/{first['dtype']}"
        tolerance = TOLERANCES[first["dtype"]]
        for name in first["errors"]:
            abs_error = max(r["errors"][name][0] for r in case)
            scale = max(r["errors"][name][1] for r in case)
            rel = abs_error / scale if scale else abs_error
            tensors.append(
                TensorCheck(
                    check=first["case"],
                    dtype=first["dtype"],
                    tensor=name,
                    max_abs_error=abs_error,
                    max_rel_error=rel,
                    tolerance=tolerance,
                    ok=rel <= tolerance,
                )
            )
        collectives[label] = first["collectives"]
        if first["collectives"] != EXPECTED_COLLECTIVES[first["case"]]:
            failures.append(f"{label}: collectives {first['collectives']}")
    bad = [f"{t.check}/{t.dtype} {t.tensor}" for t in tensors if not t.ok]
    if bad:
        failures.insert(0, f"out of tolerance: {', '.join(bad)}")
    expected = {c: EXPECTED_COLLECTIVES[c] for c in {t.check for t in tensors}}
    return {
        **_verdict(failures),
        "tensors": tensors,
        "collectives": collectives,
        "expected_collectives": expected,
    }


def build_moe(config, per_rank: list[dict]) -> dict:
    assigned = [sum(col) for col in zip(*(r["assigned"] for r in per_rank), strict=True)]
    kept = [sum(col) for col in zip(*(r["kept"] for r in per_rank), strict=True)]
    wrong = sum(r["wrong_elements"] for r in per_rank)

    def slowest(name):
        return max(statistics.fmean(r["times"][name]) for r in per_rank)

    moe = MoeRanks(
        tokens=config.tokens * len(per_rank),
        capacity_per_rank=per_rank[0]["capacity"],
        assigned_per_expert=assigned,
        kept_per_expert=kept,
        dropped=sum(r["dropped"] for r in per_rank),
        imbalance=imbalance(assigned),
        kept_imbalance=imbalance(kept),
        load_balancing_loss=statistics.fmean(r["loss"] for r in per_rank),
        dispatch_time_us=slowest("dispatch"),
        combine_time_us=slowest("combine"),
        max_abs_error=max(r["max_abs_error"] for r in per_rank),
        wrong_elements=wrong,
        checked_elements=sum(r["checked_elements"] for r in per_rank),
    )
    return {**_verdict([f"combine: {wrong} wrong elements"] if wrong else []), "moe": moe}
