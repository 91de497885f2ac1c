"""MoE training runs in the report: routing and all_to_all figures, tokens per expert.

Read from a train result's ``summary.moe`` (each figure averaged over the
measured steps) and its steps' ``moe`` entries (see mtb's metrics).
"""

from mtb_report.formatting import number, percent, size
from mtb_report.model import Table
from mtb_report.records import train_record, variant_label

MOE_COLUMNS = (
    "run",
    "ep",
    "tokens/expert min·mean·max",
    "dropped",
    "imbalance",
    "aux loss",
    "all_to_all/step",
    "all_to_all ms/step",
    "dispatch+combine share",
)


def is_moe(document: dict) -> bool:
    return bool(document.get("summary", {}).get("moe"))


def expert_loads(document: dict) -> list[list[float]]:
    """Tokens per expert, per MoE layer, averaged over the first trial's measured steps."""
    steps = [s["moe"] for s in document["trials"][0]["steps"]]
    layers = zip(*(s["tokens_per_expert"] for s in steps), strict=True)
    return [[sum(column) / len(steps) for column in zip(*layer, strict=True)] for layer in layers]


def moe_row(document: dict) -> list[str]:
    summary = {key: value["mean"] for key, value in document["summary"]["moe"].items()}
    loads = [load for layer in expert_loads(document) for load in layer]
    layout = document.get("environment", {}).get("layout") or {}
    return [
        variant_label(train_record(document)),
        str(layout.get("ep", 1)),
        " · ".join(number(v) for v in (min(loads), sum(loads) / len(loads), max(loads))),
        percent(summary["dropped_fraction"]),
        number(summary["imbalance"], 3),
        number(summary["aux_loss"], 4),
        size(summary["all_to_all_bytes"]),
        number(summary["all_to_all_ms"], 2),
        percent(summary["dispatch_combine_share"]),
    ]


def moe_table(documents: list[dict]) -> Table | None:
    """One row per MoE run of a group of equal work; None when it has none."""
    runs = [d for d in documents if is_moe(d)]
    if not runs:
        return None
    notes = [
        "tokens per expert: kept (token, expert) assignments of a step over all ranks, "
        "min, mean and max over the experts of every MoE layer; dropped: assignments past "
        "capacity; imbalance: max / mean load of the worst layer; all_to_all: bytes sent "
        "and time of the busiest rank (dispatch and combine, forward and backward), its "
        "share of the step time. Means over the measured steps.",
    ]
    return Table("Mixture of experts", MOE_COLUMNS, [moe_row(d) for d in runs], notes)


def train_tokens_per_expert(plt, documents):
    """Mean tokens per expert of each MoE layer of each MoE training run, as lines."""
    runs = [d for d in documents if d["kind"] == "train" and d["status"] == "ok" and is_moe(d)]
    if not runs:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for document in runs:
        label = variant_label(train_record(document))
        for index, loads in enumerate(expert_loads(document)):
            axes.plot(range(len(loads)), loads, marker="o", label=f"{label} layer {index}")
    axes.set(xlabel="expert", ylabel="tokens per step", title="Tokens per expert (training)")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return figure
