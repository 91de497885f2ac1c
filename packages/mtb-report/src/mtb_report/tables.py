"""The report model from result documents: sections per environment, tables per group."""

from mtb.api import above_peak
from mtb_report import grouping
from mtb_report.formatting import DASH, cell, mean_std, mfu, number, percent, size
from mtb_report.kinds import kind_tables
from mtb_report.model import Report, Section, Table
from mtb_report.moe_runs import moe_table
from mtb_report.plan import plan_tables
from mtb_report.records import (
    checkpoint_record,
    options_text,
    sync_text,
    tokens_trained,
    train_record,
    variant_label,
    world_size,
)

TRAIN_COLUMNS = (
    "strategy",
    "options",
    "grad sync",
    "syncs/step",
    "world size",
    "layout",
    "data ms",
    "fwd+bwd ms",
    "optimizer ms",
    "step ms",
    "tokens/s",
    "MFU",
    "peak memory",
    "model state",
    "scaling eff.",
    "memory saving vs ddp",
    "step time vs ddp",
    "notes",
)
RUNTIME_COLUMNS = (
    "run",
    "world size",
    "trials",
    "steps",
    "warmup",
    "tokens measured",
    "start step",
    "resumed from",
)


def order(record: dict) -> tuple:
    return (record["strategy"] or "", grouping.variant_key(record), record["world_size"] or 0)


def scaling_base(record: dict, records: list[dict]) -> dict | None:
    """The run ``record`` scales from: equal in all but world size (same table, strategy,
    options and gradient-sync mode), at the smallest world size, smaller than its own."""
    variant = grouping.variant_key(record)
    same = [r for r in records if grouping.variant_key(r) == variant and r["tokens_per_s"]]
    base = min(same, key=lambda r: r["world_size"], default=None)
    if base is None or base["world_size"] == record["world_size"]:
        return None
    return base


def scaling_efficiency(record: dict, records: list[dict]) -> float | None:
    """(tokens/s at N / N) / (tokens/s at M / M), M the world size of the scaling base."""
    base = scaling_base(record, records)
    if base is None or not record["tokens_per_s"]:
        return None
    return (record["tokens_per_s"] / record["world_size"]) / (
        base["tokens_per_s"] / base["world_size"]
    )


def against_ddp(record: dict, records: list[dict], key: str) -> float | None:
    """Relative difference of ``key`` from ddp at the same world size.

    The reference is the one ddp run there with the same requested gradient-sync mode
    and no options; with none, or several, there is no comparison.
    """
    ddp = [
        r
        for r in records
        if r["strategy"] == "ddp"
        and r["world_size"] == record["world_size"]
        and r["gradient_sync_requested"] == record["gradient_sync_requested"]
        and not r["strategy_options"]
    ]
    if len(ddp) != 1 or ddp[0] is record or not ddp[0][key] or record[key] is None:
        return None
    ddp = ddp[0]
    return (record[key] - ddp[key]) / ddp[key]


def notes(record: dict, records: list[dict]) -> str:
    flags = []
    base = scaling_base(record, records)
    if base and base["torch_threads"] != record["torch_threads"]:
        flags.append(
            f"scaling base ran {base['torch_threads']} threads/rank, this run "
            f"{record['torch_threads']}"
        )
    if record["single_run"]:
        flags.append("single run")
    if record["noisy"]:
        flags.append(f"noisy (CV {percent(record['tokens_per_s_cv'])})")
    if above_peak(record["mfu"]):
        flags.append("MFU above 100 %: peak too low")
    return "; ".join(flags) or DASH


def train_row(record: dict, records: list[dict]) -> list[str]:
    repeated = bool(record["trials"] and record["trials"] > 1)
    saving = against_ddp(record, records, "peak_memory_bytes")
    return [
        record["strategy"],
        options_text(record["strategy_options"]) or DASH,
        cell(sync_text(record)),
        number(record["gradient_syncs_per_step"], 2),
        str(record["world_size"]),
        record["layout"],
        number(record["data_ms"], 2),
        number(record["forward_backward_ms"], 2),
        number(record["optimizer_ms"], 2),
        mean_std(record["step_ms"], record["step_ms_std"], repeated, 2),
        mean_std(record["tokens_per_s"], record["tokens_per_s_std"], repeated, 0),
        mfu(record["mfu"]),
        size(record["peak_memory_bytes"], record["peak_memory_bytes_std"] if repeated else None),
        size(record["model_state_bytes"]),
        percent(scaling_efficiency(record, records)),
        DASH if saving is None else percent(-saving, signed=True),
        percent(against_ddp(record, records, "step_ms"), signed=True),
        notes(record, records),
    ]


def resumed_from(checkpoint: dict) -> str:
    resumed = checkpoint.get("resumed")
    if not resumed:
        return "no"
    exact = ", exact" if resumed.get("exact") else ""
    return f"{resumed.get('path')} (step {resumed.get('step')}{exact})"


def runtime_row(document: dict) -> list[str]:
    record = train_record(document)
    checkpoint = checkpoint_record(document)
    training = document["config"].get("training", {})
    return [
        variant_label(record),
        str(record["world_size"]),
        str(record["trials"]),
        str(training.get("steps")),
        str(training.get("warmup_steps")),
        f"{tokens_trained(document):,}",
        str(checkpoint.get("start_step", 0)),
        resumed_from(checkpoint),
    ]


LAYOUT_COLUMNS = (
    "layout",
    "strategy",
    "world size",
    "micro-batch x accumulation",
    "step ms",
    "tokens/s",
    "MFU",
    "model state",
    "peak memory",
)


def layout_row(document: dict) -> list[str]:
    record = train_record(document)
    training = document["config"].get("training", {})
    split = f"{document['config'].get('data', {}).get('micro_batch_size')} x "
    return [
        record["layout"],
        variant_label(record),
        str(record["world_size"]),
        split + str(training.get("grad_accum_steps")),
        number(record["step_ms"], 2),
        number(record["tokens_per_s"], 0),
        mfu(record["mfu"]),
        size(record["model_state_bytes"]),
        size(record["peak_memory_bytes"]),
    ]


def layout_tables(documents: list[dict]) -> list[Table]:
    """Per global batch of equal work trained under two or more layouts: one row per run."""
    tables = []
    for group in grouping.split(documents, grouping.layout_key):
        if len({train_record(d)["layout"] for d in group}) < 2:
            continue
        group = sorted(group, key=lambda d: -(train_record(d)["tokens_per_s"] or 0))
        sequences = train_record(group[0])["global_batch"]
        title = f"Layouts on a global batch of {sequences} sequences"
        tables.append(Table(title, LAYOUT_COLUMNS, [layout_row(d) for d in group]))
    return tables


def train_tables(documents: list[dict]) -> list[Table]:
    """Per group of equal work: the metrics table and the runtime state."""
    tables = []
    ok = [d for d in documents if d["status"] == "ok"]
    differing = grouping.settings_differences(ok)
    for group in grouping.split(ok, grouping.settings_key):
        group = sorted(group, key=lambda d: order(train_record(d)))
        records = [train_record(d) for d in group]
        title = f"Training: {grouping.describe_settings(group[0], differing)}"
        rows = [train_row(r, records) for r in records]
        legend = [
            "step ms, tokens/s and peak memory are mean ± std over trials when repeated; "
            "CV of tokens/s above 5% is flagged noisy.",
            "grad sync is the gradient-sync mode the strategy used (the requested one in "
            "parentheses when it differs); syncs/step counts the synchronisations per step.",
            "scaling eff. compares runs equal in all but world size (same strategy, options "
            "and gradient sync) against the smallest world size among them; memory and step "
            "time are relative to ddp (no options, same requested sync) at the same world size.",
        ]
        tables.append(Table(title, TRAIN_COLUMNS, rows, legend))
        tables.append(Table("Runtime state", RUNTIME_COLUMNS, [runtime_row(d) for d in group]))
        experts = moe_table(group)
        if experts is not None:
            tables.append(experts)
    return tables + layout_tables(ok)


def failures_table(documents: list[dict]) -> Table | None:
    failed = [d for d in documents if d["status"] != "ok"]
    if not failed:
        return None
    columns = ("kind", "strategy", "world size", "status", "error")
    rows = [
        [
            d["kind"],
            cell(d.get("config", {}).get("strategy")),
            cell(world_size(d)),
            d["status"],
            cell(d.get("error")),
        ]
        for d in failed
    ]
    return Table("Failed, out-of-memory, timed-out and skipped runs", columns, rows)


def git(document: dict) -> dict:
    """The git part of a result's provenance; {} when it has none."""
    return (document.get("provenance") or {}).get("git") or {}


def banners(documents: list[dict]) -> list[str]:
    """Warnings for results that cannot be traced or that say they are unverified."""
    warnings = []
    untraced = [d for d in documents if not git(d).get("revision")]
    if untraced:
        warnings.append(f"{len(untraced)} result(s) carry no provenance: they cannot be reproduced")
    unverified = [d for d in documents if d.get("verified") is False]
    if unverified:
        warnings.append(f"{len(unverified)} result(s) are marked unverified")
    dirty = [d for d in documents if git(d).get("dirty")]
    if dirty:
        warnings.append(
            f"{len(dirty)} result(s) were measured on a checkout with uncommitted changes"
        )
    return warnings


#: kinds whose documents have a shape of their own to render; every other kind that is
#: not train gets the generic summary and rows of :func:`kind_tables`
KIND_TABLES = {"plan": plan_tables}


def section(title: str, documents: list[dict]) -> Section:
    tables = train_tables([d for d in documents if d["kind"] == "train"])
    for document in documents:
        if document["kind"] != "train" and document["status"] == "ok":
            tables += KIND_TABLES.get(document["kind"], kind_tables)(document)
    failures = failures_table(documents)
    if failures:
        tables.append(failures)
    return Section(title, banners(documents), tables, documents)


def build_report(documents: list[dict]) -> Report:
    """Sections by environment; a warning names what differs when there are several."""
    groups = grouping.split(documents, grouping.environment_key)
    keys = [grouping.environment_key(group[0]) for group in groups]
    warnings = []
    if len(groups) > 1:
        fields = ", ".join(grouping.differences(keys))
        warnings.append(
            f"results come from {len(groups)} different environments (they differ in {fields}); "
            "each has its own section and their numbers are never compared"
        )
    sections = [
        section(f"Environment {i}: {grouping.describe_environment(key)}", group)
        for i, (key, group) in enumerate(zip(keys, groups, strict=True), start=1)
    ]
    return Report(warnings, sections)
