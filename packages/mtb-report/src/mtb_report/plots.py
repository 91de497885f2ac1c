"""Figures (matplotlib, Agg backend) as PNG bytes; only the plots the documents can fill.

matplotlib is imported inside :func:`figures` so that loading the plugin stays cheap.
"""

import io

from mtb_report.kinds import rows_of
from mtb_report.records import PHASE_KEYS, peak_memory_per_rank, train_record


def measured(documents: list[dict]) -> list[dict]:
    """Train documents that have numbers to plot."""
    return [d for d in documents if d["kind"] == "train" and d["status"] == "ok"]


def throughput_scaling(plt, documents):
    """tokens/s against world size per strategy, with each strategy's ideal-scaling line."""
    records = [train_record(d) for d in measured(documents)]
    if not records:
        return None
    strategies = sorted({r["strategy"] for r in records})
    figure, axes = plt.subplots(figsize=(6, 4))
    for strategy in strategies:
        points = sorted(
            (r["world_size"], r["tokens_per_s"]) for r in records if r["strategy"] == strategy
        )
        sizes = [p[0] for p in points]
        line = axes.plot(sizes, [p[1] for p in points], marker="o", label=strategy)[0]
        base_size, base_rate = points[0]
        ideal = [base_rate * s / base_size for s in sizes]
        axes.plot(sizes, ideal, linestyle="--", color=line.get_color(), alpha=0.5)
    axes.set(xlabel="world size", ylabel="tokens/s", title="Throughput (dashed: ideal scaling)")
    axes.legend()
    return figure


def memory_per_rank(plt, documents):
    """One bar per rank, side by side, for each run; colour names the rank."""
    runs = measured(documents)
    if not runs:
        return None
    figure, axes = plt.subplots(figsize=(6, 4))
    labelled: set[int] = set()
    for index, document in enumerate(runs):
        ranks = peak_memory_per_rank(document)
        width = 0.8 / max(len(ranks), 1)
        for rank, value in enumerate(ranks):
            label = None if rank in labelled else f"rank {rank}"
            labelled.add(rank)
            axes.bar(index + rank * width, value / 2**20, width, color=f"C{rank}", label=label)
    labels = [f"{r['strategy']} x{r['world_size']}" for r in map(train_record, runs)]
    axes.set_xticks(range(len(runs)), labels, rotation=20)
    axes.set(ylabel="peak memory per rank (MiB)", title="Peak memory per rank")
    axes.legend()
    return figure


def step_breakdown(plt, documents):
    records = [train_record(d) for d in measured(documents)]
    if not records:
        return None
    figure, axes = plt.subplots(figsize=(6, 4))
    labels = [f"{r['strategy']} x{r['world_size']}" for r in records]
    bottom = [0.0] * len(records)
    for phase in PHASE_KEYS[:-1]:
        values = [r[phase] or 0.0 for r in records]
        axes.bar(labels, values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set(ylabel="ms per step", title="Step-time breakdown")
    axes.legend()
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


PLOTS = (throughput_scaling, memory_per_rank, step_breakdown, bus_bandwidth, tokens_per_expert)


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
        figure.savefig(buffer, format="png", dpi=80)
        plt.close(figure)
        made.append((figure.axes[0].get_title(), buffer.getvalue()))
    return made
