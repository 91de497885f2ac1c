"""Result documents: the JSON every command run leaves behind.

Per-rank raw numbers are kept; each step's time is reduced as the max across
ranks, and trials are summarised (mean, std, min, p50, max, CV). Nothing is
averaged across different configs.
"""

import math
import re
import statistics

import attrs
import cattrs

from mtb import config as config_mod
from mtb.documents import result_document
from mtb.layout import Layout
from mtb.metrics import (
    MOE_SUMMARY,
    max_across_ranks,
    mfu,
    moe_step,
    summarize,
    tokens_per_second,
)

STATUSES = ("ok", "failed", "oom", "timeout", "skipped")
PHASES = ("data_ms", "forward_backward_ms", "optimizer_ms", "step_ms")


@attrs.define
class RankTrial:
    """One rank's view of one trial inside a result document."""

    rank: int
    hostname: str
    step_ms: list[float]
    loss: list[float]
    model_state_bytes: dict
    memory: dict
    #: numbers the engine measured on this rank (a pipeline's stages and bubble); may be empty
    engine_metrics: dict = attrs.field(factory=dict)


@attrs.define
class Trial:
    """One independent repetition: per-step values reduced across ranks."""

    trial: int
    tokens_per_step: int
    tokens_per_s: float
    tokens_per_s_per_device: float
    mfu: float | None
    steps: list[dict]
    per_rank: list[RankTrial]
    #: seconds torch.compile took (--compile), all in warmup steps: the slowest rank's total
    compile_s: float | None = None


@attrs.define
class RunResult:
    """The train result document; ``to_document`` gives the JSON-ready dict."""

    kind: str
    schema_version: int
    status: str
    error: str | None
    config: dict
    config_fingerprint: str
    plugins: list[dict]
    provenance: dict
    environment: dict
    model: dict
    trials: list[Trial]
    summary: dict
    #: what the strategy resolved at run time (sync mode, engine config), from rank 0
    strategy_details: dict = attrs.field(factory=dict)
    #: saves, resume and runtime state of a checkpointed run (None without checkpointing)
    checkpoint: dict | None = None
    #: digests of the final state by component (None unless checkpoint.record_digests)
    state_digests: dict | None = None
    #: the cross-rank profile summary of a profiled run (kind "profile"; None otherwise)
    profile: dict | None = None
    #: a profiled run's per-rank operator rows (rank, name, total_ms, count) for reports
    rows: list[dict] | None = None
    #: what kind of failure (cpu_oom, cuda_oom, timeout, an exception type); None when ok
    error_class: str | None = None
    #: the run's --evidence mode, and whether its provenance passed the formal gate
    evidence: str = "exploratory"
    verified: bool | None = None
    #: plugin, distribution and version of the strategy, backend, profiler and reporters used
    components: dict | None = None
    #: observer hooks that raised during the run: plugin, hook, ranks, error (mtb.observers)
    plugin_failures: list[dict] = attrs.field(factory=list)


def document_kind(config) -> str:
    """``profile`` for a run under a profiler (its numbers carry the profiler), else ``train``."""
    return "profile" if config.profile.enabled else "train"


result_converter = cattrs.Converter()


def _finite(value):
    """JSON has no NaN or infinity: such values become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def to_document(result: RunResult) -> dict:
    return _finite(result_converter.unstructure(result))


def from_document(document: dict) -> RunResult:
    return result_converter.structure(document, RunResult)


def reduce_trial(
    index: int,
    ranks: list,
    hostnames: list[str],
    world_size: int,
    flops_per_token: int,
    peak_flops: float | None,
    layout: Layout | None = None,
) -> Trial:
    """Combine every rank's record of one trial (``ranks`` ordered by rank).

    Tokens count once per data-parallel rank: tensor- and pipeline-parallel
    peers train on the same batch (``layout``; None: every rank its own).
    """
    measured = [[s for s in record.steps if not s.warmup] for record in ranks]
    per_phase = {
        phase: max_across_ranks([[getattr(s, phase) for s in steps] for steps in measured])
        for phase in PHASES
    }
    losses = [[s.loss for s in steps] for steps in measured]
    mean_loss = [sum(values) / len(values) for values in zip(*losses, strict=True)]
    layout = layout or Layout(dp_shard=world_size)
    tokens_per_step = sum(
        steps[0].tokens for rank, steps in enumerate(measured) if layout.counts_tokens(rank)
    )
    rate = tokens_per_second(tokens_per_step, per_phase["step_ms"])
    steps = [
        {
            "step": s.step,
            "loss": mean_loss[i],
            **{phase: per_phase[phase][i] for phase in PHASES},
            "lr": s.lr,
            "grad_norm": s.grad_norm,
            "clipped": s.clipped,
            "skipped": s.skipped,
            "gradient_syncs": s.gradient_syncs,
            **_moe_entry(
                [steps[i] for rank, steps in enumerate(measured) if layout.routes_own_tokens(rank)],
                per_phase["step_ms"][i],
            ),
        }
        for i, s in enumerate(measured[0])
    ]
    per_rank = [
        RankTrial(
            r.rank,
            hostnames[r.rank],
            [s.step_ms for s in measured[r.rank]],
            losses[r.rank],
            r.model_state_bytes,
            r.memory,
            r.engine_metrics,
        )
        for r in ranks
    ]
    return Trial(
        index,
        tokens_per_step,
        rate,
        rate / world_size,
        mfu(rate / world_size, flops_per_token, peak_flops),
        steps,
        per_rank,
        max(sum(s.compile_ms for s in r.steps) for r in ranks) / 1000.0,
    )


def _moe_entry(per_rank: list, step_ms: float) -> dict:
    """``{"moe": ...}`` for a step of an MoE model, nothing for a dense one."""
    if per_rank[0].moe is None:
        return {}
    return {"moe": moe_step([s.moe for s in per_rank], step_ms)}


def _max_or_none(values) -> int | None:
    """The largest of the ranks' figures; None when a rank did not measure it."""
    values = list(values)
    return None if None in values else max(values)


def _moe_summary(trials: list[Trial]) -> dict:
    """Each MoE figure averaged over a trial's steps, summarised across trials."""
    if "moe" not in trials[0].steps[0]:
        return {}
    return {
        "moe": {
            key: summarize([statistics.fmean(s["moe"][key] for s in t.steps) for t in trials])
            for key in MOE_SUMMARY
        }
    }


#: a model-state estimate further than this (relative) from the measured bytes is flagged
ESTIMATE_TOLERANCE = 0.10


def estimate_error(measured: float | None, estimate: int) -> float | None:
    """Relative error of the analytic estimate against the measured bytes."""
    return (estimate - measured) / measured if measured else None


def summarize_trials(trials: list[Trial], state_estimate: dict) -> dict:
    """Across-trial statistics of the headline numbers; a single run says so.

    ``state_estimate`` is the strategy's analytic model-state bytes per rank.
    """

    def series(get):
        return summarize([v for v in (get(t) for t in trials) if v is not None])

    summary = {
        "trials": len(trials),
        "single_run": len(trials) == 1,
        "tokens_per_s": series(lambda t: t.tokens_per_s),
        "tokens_per_s_per_device": series(lambda t: t.tokens_per_s_per_device),
        "mfu": series(lambda t: t.mfu),
        "final_loss": series(lambda t: t.steps[-1]["loss"]),
        "compile_s": series(lambda t: t.compile_s),
        "peak_rss_bytes": series(lambda t: max(r.memory["peak_rss_bytes"] for r in t.per_rank)),
        "activation_saved_bytes_per_rank": series(
            lambda t: _max_or_none(r.memory.get("activation_saved_bytes") for r in t.per_rank)
        ),
        "model_state_bytes_per_rank": series(
            lambda t: max(r.model_state_bytes["total"] for r in t.per_rank)
        ),
        "clipped_steps": series(lambda t: sum(s["clipped"] for s in t.steps)),
        "gradient_syncs_per_step": series(
            lambda t: (
                None
                if t.steps[0]["gradient_syncs"] is None
                else sum(s["gradient_syncs"] for s in t.steps) / len(t.steps)
            )
        ),
        "model_state_estimate_bytes": state_estimate,
        **_moe_summary(trials),
    }
    error = estimate_error(summary["model_state_bytes_per_rank"]["mean"], state_estimate["total"])
    summary["model_state_estimate_error"] = error
    summary["model_state_estimate_off"] = error is not None and abs(error) > ESTIMATE_TOLERANCE
    for phase in PHASES:
        summary[phase] = series(lambda t, p=phase: sum(s[p] for s in t.steps) / len(t.steps))
    if "cuda_max_allocated_bytes" in trials[0].per_rank[0].memory:
        summary["cuda_max_allocated_bytes"] = series(
            lambda t: max(r.memory["cuda_max_allocated_bytes"] for r in t.per_rank)
        )
        summary["cuda_max_reserved_bytes"] = series(
            lambda t: max(r.memory["cuda_max_reserved_bytes"] for r in t.per_rank)
        )
    return summary


CUDA_OOM_MARKERS = ("cuda out of memory", "outofmemoryerror")
CPU_OOM_MARKERS = ("can't allocate memory", "cannot allocate memory", "memoryerror", "bad_alloc")
OOM_MARKERS = (*CUDA_OOM_MARKERS, *CPU_OOM_MARKERS, "out of memory")
EXCEPTION_NAME = re.compile(r"\b([A-Z]\w*(?:Error|Exception))\b")


def failure_status(message: str) -> str:
    """``oom`` for CUDA or CPU allocation failures, else ``failed``."""
    lowered = message.lower()
    return "oom" if any(marker in lowered for marker in OOM_MARKERS) else "failed"


def error_class(status: str, message: str | None) -> str | None:
    """``cuda_oom``, ``cpu_oom``, ``timeout``, the exception's type name, or ``failed``."""
    if status in ("ok", "skipped"):
        return None
    if status == "timeout":
        return "timeout"
    lowered = (message or "").lower()
    if any(marker in lowered for marker in CUDA_OOM_MARKERS):
        return "cuda_oom"
    if status == "oom" or any(marker in lowered for marker in CPU_OOM_MARKERS):
        return "cpu_oom"
    name = EXCEPTION_NAME.search(message or "")
    return name.group(1) if name else "failed"


def failure_document(
    status: str,
    error: str,
    config,
    plugins: list[dict],
    provenance: dict,
    components: dict | None = None,
) -> dict:
    """A result for a run that produced no numbers, so the failure is never lost."""
    from mtb.provenance import evidence_fields

    return to_document(
        RunResult(
            **result_document(
                document_kind(config),
                status=status,
                error=error,
                plugins=plugins,
                provenance=provenance,
            ),
            config=config_mod.to_dict(config),
            config_fingerprint=config_mod.fingerprint(config),
            environment={},
            model={},
            trials=[],
            summary={},
            error_class=error_class(status, error),
            components=components,
            **evidence_fields(config.evidence, provenance),
        )
    )
