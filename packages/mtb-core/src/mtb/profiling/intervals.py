"""Interval arithmetic on trace timelines: merge, length, intersection, spread.

Overlap follows Holistic Trace Analysis: merge a rank's compute intervals and
its communication intervals separately, then overlap = |compute ∩ comm| /
|comm|. Merging first makes nested and repeated events count once.
"""

import statistics

Interval = tuple[float, float]


def merge(intervals) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time as ``intervals``."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def length(intervals) -> float:
    """Total time covered by ``intervals`` (overlaps counted once)."""
    return sum(end - start for start, end in merge(intervals))


def intersection(first, second) -> list[Interval]:
    """The time covered by both interval sets, as disjoint intervals."""
    a, b = merge(first), merge(second)
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def overlap_ratio(compute, comm) -> float | None:
    """|compute ∩ comm| / |comm|; None when there is no communication time."""
    comm_time = length(comm)
    if comm_time <= 0:
        return None
    return length(intersection(compute, comm)) / comm_time


def spread(values: list[float]) -> dict:
    """min, p50 and max of per-rank values and where the maximum lies.

    The straggler ratio is max / p50: 1.0 means no rank lags the median rank.
    """
    p50 = statistics.median(values)
    slowest = max(range(len(values)), key=lambda i: (values[i], -i))
    return {
        "min": min(values),
        "p50": p50,
        "max": values[slowest],
        "ratio": values[slowest] / p50 if p50 > 0 else None,
        "argmax": slowest,
    }
