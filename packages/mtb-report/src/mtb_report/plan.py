"""Plan documents (``mtb plan``): every layout's predicted step time and memory for a
cluster, ranked, and, once the planner has run the layouts, how far off it was.

The numbers of a plan are predictions from a device profile, never measurements;
every title says so, and says "not measured" when even the profile was assumed.
Measured numbers appear only in the verification tables, next to the prediction
they test. Only the result file is read: mtb-report never imports the planner.
"""

from mtb_report.formatting import DASH, cell, mfu, number, percent, size
from mtb_report.model import Table

PLAN_COLUMNS = (
    "rank",
    "layout",
    "step ms",
    "tokens/s",
    "MFU",
    "peak memory/rank",
    "compute · exposed comm · bubble ms",
    "dominant",
    "note",
)
VERIFY_COLUMNS = (
    "layout",
    "predicted step ms",
    "measured step ms",
    "step error",
    "predicted peak memory",
    "measured peak memory",
    "memory error",
    "model-state error",
    "status",
)
#: (verification key, what it is, format, how its target bounds it)
FIGURES = (
    ("median_abs_step_time_error", "median |step-time error|", percent, "≤"),
    ("max_abs_step_time_error", "max |step-time error|", percent, "≤"),
    ("median_abs_peak_memory_error", "median |peak-memory error|", percent, "≤"),
    ("max_abs_model_state_error", "max |model-state error|", percent, "≤"),
    ("spearman", "Spearman rank correlation", lambda value: number(value, 2), "≥"),
    ("best_gap", "step-time gap of the predicted best to the measured best", percent, "≤"),
)


def plans(documents: list[dict]) -> list[dict]:
    """Plan documents with layouts to show (a failed plan goes to the failures table)."""
    return [d for d in documents if d["kind"] == "plan" and d["status"] == "ok"]


def predicted(layout: dict) -> dict:
    """The layout's prediction; {} for a layout the runtime refuses."""
    return layout.get("predicted") or {}


def ok_measurement(layout: dict) -> dict:
    """What running the layout measured, when it ran to the end; {} otherwise."""
    measured = layout.get("measured") or {}
    return measured if measured.get("status") == "ok" else {}


def standing(layout: dict) -> int:
    """0 ranked (fits), 1 does not fit, 2 refused: the order the table lists them in."""
    if layout.get("refused"):
        return 2
    return 0 if layout.get("fits") else 1


def ranked(document: dict) -> list[dict]:
    """Fitting layouts by rank, then those that do not fit, then refused ones; the planner
    writes them so, and sorting again keeps a hand-edited file honest."""
    layouts = document.get("layouts") or []
    return sorted(layouts, key=lambda layout: (standing(layout), layout.get("rank") or 0))


def profile_measured(document: dict) -> bool:
    return bool((document.get("config") or {}).get("profile", {}).get("measured"))


def basis(document: dict) -> str:
    """How far to trust the numbers, as every plan title says it."""
    if profile_measured(document):
        return "predicted from a measured device profile"
    return "predicted, not measured: the device profile was not measured"


def workload_text(workload: dict) -> str:
    """``small, global_batch 4, seq_len 256, ...``: the preset, then every other setting."""
    rest = [f"{k} {cell(v)}" for k, v in workload.items() if k != "preset"]
    return ", ".join([str(workload.get("preset", DASH)), *rest])


def world_text(world: dict) -> str:
    nodes, devices = world.get("nodes"), world.get("devices_per_node")
    return f"{nodes} node(s) x {devices} device(s) (world size {world.get('world_size')})"


def profile_text(profile: dict) -> str:
    where = f"measured on {profile.get('device')}" if profile.get("measured") else "not measured"
    return f"{profile.get('name', DASH)} ({where})"


def counts_text(layouts: list[dict]) -> str:
    counts = [sum(standing(layout) == s for layout in layouts) for s in range(3)]
    return "{} fit, {} do not fit, {} refused".format(*counts)


def verified_text(verification: dict | None) -> str:
    if not verification:
        return "not run"
    ran, where = verification.get("verified"), verification.get("matrix_dir")
    return f"{ran} layout(s) ran (matrix in {where})"


def summary_table(document: dict) -> Table:
    """The question the plan answers (workload, world, profile) and how much of it ran."""
    config = document.get("config") or {}
    rows = [
        ["workload", workload_text(config.get("workload") or {})],
        ["world", world_text(config.get("world") or {})],
        ["device profile", profile_text(config.get("profile") or {})],
        ["memory capacity/rank", size(document.get("memory_capacity_bytes"))],
        ["layouts", counts_text(document.get("layouts") or [])],
        ["verification", verified_text(document.get("verification"))],
    ]
    command = (document.get("provenance") or {}).get("command")
    notes = [f"command: `{command}`"] if command else []
    return Table(f"Plan ({basis(document)})", ("field", "value"), rows, notes)


def memory_text(peak, capacity) -> str:
    return size(peak) if capacity is None else f"{size(peak)} of {size(capacity)}"


def note(layout: dict, capacity) -> str:
    """Why a layout has no rank: the runtime's reason, or how far past capacity it goes."""
    if layout.get("refused"):
        return f"refused: {layout['refused']}"
    if layout.get("fits"):
        return DASH
    peak = predicted(layout).get("peak_memory_bytes")
    if peak is None or capacity is None:
        return "does not fit"
    return f"does not fit: {size(peak - capacity)} over capacity"


def plan_row(layout: dict, capacity) -> list[str]:
    guess = predicted(layout)
    parts = ("compute_ms", "exposed_comm_ms", "bubble_ms")
    return [
        cell(layout.get("rank")),
        str(layout.get("label")),
        number(guess.get("step_time_ms"), 2),
        number(guess.get("tokens_per_s"), 0),
        mfu(guess.get("mfu")),
        memory_text(guess.get("peak_memory_bytes"), capacity) if guess else DASH,
        " · ".join(number(guess.get(p), 1) for p in parts) if guess else DASH,
        cell(guess.get("dominant")),
        note(layout, capacity),
    ]


def layouts_table(document: dict) -> Table:
    capacity = document.get("memory_capacity_bytes")
    rows = [plan_row(layout, capacity) for layout in ranked(document)]
    notes = [
        "rank 1 is the fastest layout predicted to fit in memory; dominant names the "
        "largest share of the predicted step (compute, an exposed collective or the "
        "pipeline bubble)."
    ]
    return Table(f"Plan: layouts ranked ({basis(document)})", PLAN_COLUMNS, rows, notes)


def verify_row(layout: dict) -> list[str]:
    guess, measured = predicted(layout), layout.get("measured") or {}
    error = layout.get("error") or {}
    return [
        str(layout.get("label")),
        number(guess.get("step_time_ms"), 2),
        number(measured.get("step_time_ms"), 2),
        percent(error.get("step_time"), signed=True),
        size(guess.get("peak_memory_bytes")),
        size(measured.get("peak_memory_bytes")),
        percent(error.get("peak_memory"), signed=True),
        percent(error.get("model_state"), signed=True),
        cell(measured.get("status")),
    ]


def verify_table(document: dict) -> Table:
    """Each layout that ran: its prediction beside its measurement."""
    ran = [layout for layout in ranked(document) if layout.get("measured")]
    notes = ["errors are relative: (predicted - measured) / measured."]
    title = "Plan verification: predicted vs measured"
    return Table(title, VERIFY_COLUMNS, [verify_row(layout) for layout in ran], notes)


def figure_row(key: str, label: str, fmt, bound: str, verification: dict) -> list[str]:
    targets, met = verification.get("targets") or {}, verification.get("met") or {}
    target = f"{bound} {fmt(targets[key])}" if targets.get(key) is not None else DASH
    return [label, fmt(verification.get(key)), target, cell(met.get(key))]


def verification_summary(document: dict) -> Table:
    """How good the prediction was, each figure against its target where the plan set one."""
    verification = document["verification"]
    rows = [figure_row(*figure, verification) for figure in FIGURES]
    known = {figure[0] for figure in FIGURES}
    for key, target in (verification.get("targets") or {}).items():
        if key not in known:
            met = cell((verification.get("met") or {}).get(key))
            rows.append([key, cell(verification.get(key)), cell(target), met])
    best = f"{verification.get('predicted_best')} (measured: {verification.get('measured_best')})"
    rows.insert(0, ["predicted best layout", best, DASH, DASH])
    columns = ("figure", "value", "target", "met")
    return Table("Plan verification: summary", columns, rows)


def plan_tables(document: dict) -> list[Table]:
    """The summary, the ranked layouts and, once verified, prediction against measurement."""
    tables = [summary_table(document), layouts_table(document)]
    if document.get("verification"):
        tables += [verify_table(document), verification_summary(document)]
    return tables
