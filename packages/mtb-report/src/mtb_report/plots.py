"""Figures (matplotlib, Agg backend) as PNG bytes; only the plots the documents can fill.

matplotlib is imported inside :func:`figures` so that loading the plugin stays cheap.
"""

import io
from pathlib import PurePath

from mtb_report import grouping
from mtb_report.kinds import rows_of
from mtb_report.moe_runs import train_tokens_per_expert
from mtb_report.plan import ok_measurement, plans, predicted, ranked
from mtb_report.records import PHASE_KEYS, peak_memory_per_rank, train_record, variant_label


def measured(documents: list[dict]) -> list[dict]:
    """Train documents that have numbers to plot."""
    return [d for d in documents if d["kind"] == "train" and d["status"] == "ok"]


def row_label(record: dict) -> str:
    return f"{variant_label(record)} x{record['world_size']}"


def legend_outside(axes) -> None:
    """The legend right of the axes, where it cannot cover a bar or a line."""
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")


def label_bars(axes, labels: list[str]) -> None:
    axes.set_xticks(range(len(labels)), labels, rotation=25, ha="right", fontsize="small")


def throughput(plt, documents):
    """tokens/s of each run as a bar (± std over trials when repeated)."""
    records = [train_record(d) for d in measured(documents)]
    if not records:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    errors = [(r["tokens_per_s_std"] or 0.0) if (r["trials"] or 0) > 1 else 0.0 for r in records]
    axes.bar(
        range(len(records)),
        [r["tokens_per_s"] or 0.0 for r in records],
        yerr=errors,
        capsize=4,
        color=[f"C{i % 10}" for i in range(len(records))],
    )
    label_bars(axes, [row_label(r) for r in records])
    axes.set(ylabel="tokens/s", title="Throughput per run (± std over trials)")
    return figure


def scaling_series(documents: list[dict]) -> dict[str, list[tuple]]:
    """(world size, tokens/s) per variant of equal work that ran at two or more world sizes;
    named ``(table N)`` too when the section has several tables."""
    series: dict[tuple, dict] = {}
    for document in documents:
        record = train_record(document)
        if record["tokens_per_s"]:
            key = (grouping.settings_key(document), grouping.variant_key(record))
            entry = series.setdefault(key, {"label": variant_label(record), "points": []})
            entry["points"].append((record["world_size"], record["tokens_per_s"]))
    tables = list(dict.fromkeys(settings for settings, _ in series))
    named = {}
    for (settings, _), entry in series.items():
        if len({size for size, _ in entry["points"]}) >= 2:
            table = f" (table {tables.index(settings) + 1})" if len(tables) > 1 else ""
            named[entry["label"] + table] = sorted(entry["points"])
    return named


def throughput_scaling(plt, documents):
    """tokens/s against world size per variant, with its ideal-scaling line; only for
    variants measured at two or more world sizes."""
    series = scaling_series(measured(documents))
    if not series:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, points in sorted(series.items()):
        sizes = [p[0] for p in points]
        line = axes.plot(sizes, [p[1] for p in points], marker="o", label=name)[0]
        base_size, base_rate = points[0]
        ideal = [base_rate * s / base_size for s in sizes]
        axes.plot(sizes, ideal, linestyle="--", color=line.get_color(), alpha=0.5)
    axes.set_xticks(sorted({p[0] for points in series.values() for p in points}))
    axes.set(xlabel="world size", ylabel="tokens/s", title="Scaling (dashed: ideal scaling)")
    legend_outside(axes)
    return figure


def memory_per_rank(plt, documents):
    """One bar per rank, side by side and centred on the run's label; colour names the rank."""
    runs = measured(documents)
    if not runs:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    labelled: set[int] = set()
    for index, document in enumerate(runs):
        ranks = peak_memory_per_rank(document)
        width = 0.8 / max(len(ranks), 1)
        for rank, value in enumerate(ranks):
            label = None if rank in labelled else f"rank {rank}"
            labelled.add(rank)
            offset = (rank - (len(ranks) - 1) / 2) * width
            axes.bar(index + offset, value / 2**20, width, color=f"C{rank}", label=label)
    label_bars(axes, [row_label(r) for r in map(train_record, runs)])
    axes.set(ylabel="peak memory per rank (MiB)", title="Peak memory per rank")
    legend_outside(axes)
    return figure


def step_breakdown(plt, documents):
    records = [train_record(d) for d in measured(documents)]
    if not records:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    bottom = [0.0] * len(records)
    for phase in PHASE_KEYS[:-1]:
        values = [r[phase] or 0.0 for r in records]
        axes.bar(range(len(records)), values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    label_bars(axes, [row_label(r) for r in records])
    axes.set(ylabel="ms per step", title="Step-time breakdown")
    legend_outside(axes)
    return figure


#: a run plots its loss curve from this many measured steps: fewer say nothing of learning
MIN_CURVE_STEPS = 10


def data_label(document: dict) -> str:
    """What the run trained on: ``synthetic`` or the token file's name."""
    source = document.get("config", {}).get("data", {}).get("source", "synthetic")
    return "synthetic" if source == "synthetic" else PurePath(source).name


def loss_curves(plt, documents):
    """Loss per measured step of each run's first trial, named by its data, so a run on a
    token file and one on synthetic tokens show side by side."""
    runs = [d for d in measured(documents) if len(d["trials"][0]["steps"]) >= MIN_CURVE_STEPS]
    if not runs:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for document in runs:
        steps = [s for s in document["trials"][0]["steps"] if s.get("loss") is not None]
        label = f"{row_label(train_record(document))} on {data_label(document)}"
        axes.plot([s["step"] for s in steps], [s["loss"] for s in steps], label=label)
    axes.set(xlabel="step", ylabel="loss", title="Training loss per step")
    legend_outside(axes)
    return figure


def series_label(row: dict) -> str:
    return " ".join(str(row[k]) for k in ("operation", "placement") if row.get(k))


def bus_bandwidth(plt, documents):
    """busbw against message size, one line per operation (and placement, where given)."""
    rows = [row for d in documents if d["kind"] == "comm" for row in rows_of(d)]
    rows = [r for r in rows if r.get("busbw_gbps") is not None and "bytes" in r]
    if not rows:
        return None
    figure, axes = plt.subplots(figsize=(6, 4))
    for name in sorted({series_label(r) for r in rows}):
        points = sorted((r["bytes"], r["busbw_gbps"]) for r in rows if series_label(r) == name)
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    axes.set_xscale("log", base=2)
    axes.set(xlabel="message size (bytes)", ylabel="busbw (GB/s)", title="Bus bandwidth")
    axes.legend()
    return figure


def tokens_per_expert(plt, documents):
    """Tokens routed to (and kept by) each expert, from the first MoE result."""
    routed = [d["moe"] for d in documents if d["kind"] == "moe" and d.get("moe")]
    if not routed:
        return None
    figure, axes = plt.subplots(figsize=(6, 4))
    experts = range(len(routed[0]["assigned_per_expert"]))
    axes.bar(experts, routed[0]["assigned_per_expert"], label="assigned", alpha=0.5)
    axes.bar(experts, routed[0]["kept_per_expert"], label="kept", alpha=0.8)
    axes.set(xlabel="expert", ylabel="tokens", title="Tokens per expert")
    axes.legend()
    return figure


def first_plan_layouts(documents: list[dict]) -> tuple[dict, list[dict]]:
    """The first plan of the section and its layouts with a prediction, in ranked order
    (a refused layout has none); ({}, []) when the section holds no plan."""
    found = plans(documents)
    if not found:
        return {}, []
    return found[0], [layout for layout in ranked(found[0]) if predicted(layout)]


#: the colour of a layout predicted not to fit in memory
NO_FIT = "0.6"


def fit_bars(axes, layouts: list[dict], heights: list[float]) -> None:
    """One bar per layout, named below; grey (said on the x axis) where it does not fit."""
    colours = ["C0" if layout.get("fits") else NO_FIT for layout in layouts]
    axes.bar(range(len(layouts)), heights, color=colours)
    label_bars(axes, [str(layout.get("label")) for layout in layouts])
    if NO_FIT in colours:
        axes.set_xlabel("grey: predicted not to fit in memory")


def plan_throughput(plt, documents):
    """Predicted tokens/s per layout in ranked order; grey bars do not fit in memory."""
    _, layouts = first_plan_layouts(documents)
    if not layouts:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    rates = [predicted(layout).get("tokens_per_s") or 0.0 for layout in layouts]
    fit_bars(axes, layouts, rates)
    axes.set(ylabel="tokens/s (predicted)", title="Plan: predicted tokens/s per layout")
    return figure


def plan_memory(plt, documents):
    """Predicted peak memory per rank of each layout against the memory of one device,
    so a bar above the line is a layout that would run out of memory."""
    document, layouts = first_plan_layouts(documents)
    if not layouts:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    peaks = [(predicted(layout).get("peak_memory_bytes") or 0) / 2**20 for layout in layouts]
    fit_bars(axes, layouts, peaks)
    capacity = document.get("memory_capacity_bytes")
    if capacity:
        axes.axhline(capacity / 2**20, color="C3", linestyle="--", label="capacity")
        legend_outside(axes)
    axes.set(ylabel="peak memory per rank (MiB)", title="Plan: predicted peak memory per rank")
    return figure


def plan_accuracy(plt, documents):
    """Measured against predicted step time of each layout that ran; points on the
    diagonal were predicted exactly, above it the layout ran slower than predicted."""
    _, layouts = first_plan_layouts(documents)
    points = [
        (predicted(layout)["step_time_ms"], ok_measurement(layout)["step_time_ms"], layout)
        for layout in layouts
        if predicted(layout).get("step_time_ms") and ok_measurement(layout).get("step_time_ms")
    ]
    if not points:
        return None
    figure, axes = plt.subplots(figsize=(6, 5))
    axes.scatter([p[0] for p in points], [p[1] for p in points])
    for guess, measured, layout in points:
        axes.annotate(
            str(layout.get("label")),
            (guess, measured),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize="small",
        )
    ends = [min(min(p[:2]) for p in points), max(max(p[:2]) for p in points)]
    axes.plot(ends, ends, linestyle="--", color="0.5", label="y = x (exact)")
    axes.set(
        xlabel="predicted step ms",
        ylabel="measured step ms",
        title="Plan verification: predicted vs measured step time",
    )
    legend_outside(axes)
    return figure


PLOTS = (
    throughput,
    throughput_scaling,
    memory_per_rank,
    step_breakdown,
    loss_curves,
    bus_bandwidth,
    tokens_per_expert,
    train_tokens_per_expert,
    plan_throughput,
    plan_memory,
    plan_accuracy,
)


def figures(documents: list[dict]) -> list[tuple[str, bytes]]:
    """(title, PNG bytes) of every plot the documents provide data for."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for plot in PLOTS:
        figure = plot(plt, documents)
        if figure is None:
            continue
        figure.tight_layout()
        buffer = io.BytesIO()
        # bbox "tight" keeps legends placed outside the axes inside the image
        figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
        plt.close(figure)
        made.append((figure.axes[0].get_title(), buffer.getvalue()))
    return made
