"""``mtb megatron run|matrix``: every topology, every repeat, then the document.

Launch records keep every raw number; each topology gets its validity
verdict, and a topology that is not performance-valid has its throughput
withheld from the rows and summaries (the parsed log lines keep it).
"""

import os
from pathlib import Path

import attrs

from mtb.api import document_provenance, result_document, summarize, torch_info, utc_now
from mtb_megatron import runner, validity
from mtb_megatron.checkout import Checkout
from mtb_megatron.config import MegatronConfig
from mtb_megatron.transformer import Choice

VERSION_KEYS = ("torch", "cuda", "cudnn", "nccl", "gpus", "gpu_driver")


def log_dir(output: str) -> Path:
    """Logs live next to the result: ``results/x.json`` -> ``results/x.logs/``."""
    path = Path(output)
    return path.with_name(path.stem + ".logs")


def _flatten(record: dict, valid: bool) -> dict:
    """The launch's headline scalars at its top level (what report tables show)."""
    metrics, failure = record["metrics"], record["failure"] or {}
    throughput = metrics["throughput_tflops_per_gpu"]["mean"] if valid else None
    ranks = metrics.get("memory_mb_by_rank", [])
    peaks = [r["max_allocated_mb"] for r in ranks if "max_allocated_mb" in r]
    return {
        **record,
        "failure_kind": failure.get("kind"),
        "failure_line": failure.get("line"),
        "elapsed_ms_per_iteration": metrics["elapsed_ms_per_iteration"]["mean"],
        "throughput_tflops_per_gpu": throughput,
        "lm_loss": metrics["lm_loss_last"],
        "max_allocated_mb": max(peaks, default=None),
        "performance_valid": valid,
    }


def _topology_summary(records: list[dict], reasons: list[str]) -> dict:
    first, valid = records[0], not reasons

    def across(key):
        values = [r["metrics"][key]["mean"] for r in records if r["status"] == "ok"]
        return summarize([v for v in values if v is not None])

    return {
        "topology": first["topology"],
        "tp": first["tp"],
        "pp": first["pp"],
        "dp": first["dp"],
        "launches": len(records),
        "ok": sum(r["status"] == "ok" for r in records),
        "elapsed_ms_per_iteration": across("elapsed_ms_per_iteration"),
        "throughput_tflops_per_gpu": across("throughput_tflops_per_gpu") if valid else None,
        "performance_valid": valid,
        "performance_reasons": reasons,
    }


def _error(records: list[dict]) -> str | None:
    failed = [r for r in records if r["status"] != "ok"]
    if not failed:
        return None
    first = failed[0]
    failure = first["failure"]
    shown = f": {failure['line']}" if failure["line"] else ""
    return (
        f"{len(failed)} of {len(records)} launches failed; first: {first['topology']} "
        f"repeat {first['repeat']} {failure['kind']}{shown}"
    )


def execute(
    config: MegatronConfig,
    checkout: Checkout,
    choice: Choice,
    plugins: list[dict],
    mode: str,
    data: dict,
) -> dict:
    """Launch every topology ``config.repeats`` times; the megatron result document
    (``data``: what the launches read, with the dataset's digests)."""
    started = utc_now()
    logs = log_dir(config.output)
    launched = [
        [
            runner.launch(config, checkout, topology, repeat, logs)
            for repeat in range(1, config.repeats + 1)
        ]
        for topology in config.topologies
    ]
    # read after the launches: asking torch about the GPUs must not touch them before
    versions = {k: v for k, v in torch_info().items() if k in VERSION_KEYS}
    image = validity.image_identity(config.image, dict(os.environ))
    context = {"megatron": checkout.to_dict(), "versions": versions, "transformer": choice}
    topologies, runs = [], []
    for records in launched:
        reasons = validity.assess(records, config.evidence, image, context)
        topologies.append(_topology_summary(records, reasons))
        runs += [_flatten(r, not reasons) for r in records]
    reasons = list(dict.fromkeys(r for t in topologies for r in t["performance_reasons"]))
    return result_document(
        "megatron",
        status="ok" if all(r["status"] == "ok" for r in runs) else "failed",
        error=_error(runs),
        mode=mode,
        evidence=config.evidence,
        performance_valid=not reasons,
        performance_reasons=reasons,
        config=to_dict(config),
        megatron=checkout.to_dict(),
        data=data,
        transformer=attrs.asdict(choice),
        image=image,
        versions=versions,
        topologies=topologies,
        runs=runs,
        plugins=plugins,
        provenance=document_provenance(plugins, started=started),
    )


def to_dict(config) -> dict:
    """The config as stored: topologies as their TPxPP names."""
    data = attrs.asdict(config)
    data["topologies"] = [t.name for t in config.topologies]
    return data
