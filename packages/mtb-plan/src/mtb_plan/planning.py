"""A plan: every layout of a world size predicted, ranked, and written as a result document.

Rows that fit in memory come first by predicted step time (rank 1 is the
fastest), then those whose predicted peak passes the capacity, then those the
runtime refuses, each with its reason. The document (kind ``plan``) is what
``mtb report`` renders and what ``mtb plan --verify`` fills with measurements.
"""

import attrs

from mtb.api import UsageError
from mtb_plan.layouts import enumerate_layouts
from mtb_plan.step_model import predict
from mtb_plan.workload import Workload


@attrs.frozen(kw_only=True)
class World:
    """Where the workload runs: nodes times devices (ranks) per node."""

    nodes: int
    per_node: int

    @property
    def size(self) -> int:
        return self.nodes * self.per_node

    def as_dict(self) -> dict:
        return {"nodes": self.nodes, "devices_per_node": self.per_node, "world_size": self.size}


def capacity_per_rank(profile, world: World) -> int:
    """A device's memory; on CPU the node's memory, shared by the ranks on it."""
    return profile.memory_per_rank(world.per_node)


def plan_rows(pm, workload: Workload, world: World, profile) -> list[dict]:
    """Every layout as a row of the plan document, ranked."""
    profile.check_precision(workload.precision)
    capacity = capacity_per_rank(profile, world)
    registry = pm.registry("strategy")
    rows = []
    for checked in enumerate_layouts(pm, workload, world.nodes, world.per_node, profile.device):
        row = {"label": checked.candidate.label, "strategy": checked.candidate.strategy}
        row.update(options=checked.candidate.options(), rank=None, refused=checked.refused)
        if checked.refused is None:
            prediction = predict(
                checked, registry.get(checked.candidate.strategy), workload, profile
            )
            row["predicted"] = with_mfu(prediction.as_dict(), workload, world, profile)
            row["fits"] = prediction.peak_memory_bytes <= capacity
        else:
            row.update(predicted=None, fits=False)
        rows.append(row)
    return ranked(rows)


def with_mfu(predicted: dict, workload: Workload, world: World, profile) -> dict:
    """MFU (PaLM's FLOPs per token) against the profile's peak: the datasheet's where it
    gives one, else the measured matmul throughput (mtb's definition on a CPU)."""
    from mtb.api import flops_per_token, resolve_config

    model = resolve_config(flags={"preset": workload.preset}).model
    compute = profile.compute_for(world.per_node)
    peak = (compute.peak_flops_per_s or compute.matmul_flops_per_s) * world.size
    predicted["mfu"] = predicted["tokens_per_s"] * flops_per_token(model) / peak
    return predicted


def ranked(rows: list[dict]) -> list[dict]:
    """Fitting rows by step time (ranks 1..n), then unfitting by step time, then refused."""

    def key(row):
        predicted = row["predicted"]
        group = 0 if row["fits"] else (1 if predicted else 2)
        return group, predicted["step_time_ms"] if predicted else 0.0, row["label"]

    rows = sorted(rows, key=key)
    for position, row in enumerate(row for row in rows if row["fits"]):
        row["rank"] = position + 1
    return rows


def check_fits(rows: list[dict], world: World, capacity: int, workload: Workload) -> None:
    """One line when no layout runs the workload on this world, saying why."""
    predicted = [row for row in rows if row["predicted"]]
    if not predicted:
        reasons = sorted({row["refused"] for row in rows if row["refused"]})
        raise UsageError(
            f"--devices-per-node: no layout runs preset {workload.preset!r} on {world.size} ranks; "
            f"the runtime refuses each: {reasons[0] if reasons else 'no strategy is registered'}"
        )
    if not any(row["fits"] for row in rows):
        smallest = min(row["predicted"]["peak_memory_bytes"] for row in predicted)
        raise UsageError(
            f"--devices-per-node: no layout of preset {workload.preset!r} fits {world.size} "
            f"ranks: the smallest predicted peak is {smallest:,} bytes per rank, the capacity "
            f"{capacity:,}"
        )


def plan_document(pm, workload: Workload, world: World, profile, rows: list[dict]) -> dict:
    """The plan as a result document (kind ``plan``)."""
    from mtb.api import document_provenance, plugin_list, result_document

    plugins = plugin_list(pm)
    config = {
        "workload": attrs.asdict(workload),
        "world": world.as_dict(),
        "profile": {
            "name": profile.name,
            "path": profile.path,
            "measured": profile.measured,
            "device": profile.device,
            "memory_bytes": profile.memory_bytes,
        },
    }
    return result_document(
        "plan",
        config=config,
        memory_capacity_bytes=capacity_per_rank(profile, world),
        layouts=rows,
        verification=None,
        plugins=plugins,
        provenance=document_provenance(plugins),
    )
