"""``mtb report compare``: run-to-run changes per metric, as a regression gate.

Results are matched by config fingerprint and world size. A metric regresses
when it moves in its bad direction by more than the threshold (relative to
BASE) *and* by more than the noise the repeats show: twice the combined
standard deviation of the two means, sqrt(std_base² + std_new²). A result
that was ok in BASE and is not in NEW is a regression as well.
"""

import math

import attrs

from mtb_report.formatting import mfu, number, percent, size
from mtb_report.model import Table
from mtb_report.records import peak_memory_key, stat, world_size

#: metric -> +1 when higher is better, -1 when higher is worse
METRICS = {
    "tokens_per_s": +1,
    "mfu": +1,
    "step_ms": -1,
    "forward_backward_ms": -1,
    "optimizer_ms": -1,
    "peak_memory": -1,
    "model_state_bytes_per_rank": -1,
}
NOISE_SIGMAS = 2.0


@attrs.frozen
class Change:
    key: str
    metric: str
    base: float | None
    new: float | None
    relative: float | None
    verdict: str  # improved, regressed, within noise, unchanged, failed


def match_key(document: dict) -> str:
    strategy = document.get("config", {}).get("strategy")
    fingerprint = document.get("config_fingerprint", "")[:12]
    return f"{strategy} x{world_size(document)} [{fingerprint}]"


def series(document: dict, metric: str) -> dict | None:
    return stat(document, peak_memory_key(document) if metric == "peak_memory" else metric)


def verdict(base: dict, new: dict, direction: int, threshold: float) -> tuple[float, str]:
    delta = new["mean"] - base["mean"]
    relative = delta / base["mean"] if base["mean"] else 0.0
    noise = NOISE_SIGMAS * math.hypot(base["std"], new["std"])
    if delta == 0:
        return relative, "unchanged"
    if abs(relative) <= threshold or abs(delta) <= noise:
        return relative, "within noise"
    return relative, "improved" if delta * direction > 0 else "regressed"


def compare_pair(key: str, base: dict, new: dict, threshold: float) -> list[Change]:
    if base["status"] == "ok" and new["status"] != "ok":
        return [Change(key, "status", None, None, None, f"failed: {new['status']}")]
    changes = []
    for metric, direction in METRICS.items():
        old, now = series(base, metric), series(new, metric)
        if old and now:
            relative, outcome = verdict(old, now, direction, threshold)
            changes.append(Change(key, metric, old["mean"], now["mean"], relative, outcome))
    return changes


def by_key(documents: list[dict]) -> dict[str, dict]:
    return {match_key(d): d for d in documents if d["kind"] == "train"}


def compare(base: list[dict], new: list[dict], threshold: float) -> tuple[list[Change], list[str]]:
    """Changes of matched results, and the keys present on one side only."""
    old, now = by_key(base), by_key(new)
    changes = [
        c for key in old if key in now for c in compare_pair(key, old[key], now[key], threshold)
    ]
    unmatched = [f"only in BASE: {k}" for k in old if k not in now]
    unmatched += [f"only in NEW: {k}" for k in now if k not in old]
    return changes, unmatched


def is_regression(change: Change) -> bool:
    return change.verdict == "regressed" or change.verdict.startswith("failed")


def shown(metric: str, value: float | None) -> str:
    """A metric's value in the unit the report tables use."""
    if metric == "mfu":
        return mfu(value)
    if metric in ("peak_memory", "model_state_bytes_per_rank"):
        return size(value)
    return number(value, 2)


def changes_table(changes: list[Change], threshold: float) -> Table:
    columns = ("result", "metric", "base", "new", "change", "verdict")
    rows = [
        [
            c.key,
            c.metric,
            shown(c.metric, c.base),
            shown(c.metric, c.new),
            percent(c.relative, 1, True),
            c.verdict,
        ]
        for c in changes
    ]
    note = (
        f"threshold {percent(threshold)}; a change counts only beyond "
        f"{NOISE_SIGMAS:g}x the combined std of the repeats"
    )
    return Table("Comparison", columns, rows, [note])
