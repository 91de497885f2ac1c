"""Flat, raw numbers of one train document: what tables, CSV, plots and compare share."""

PHASE_KEYS = ("data_ms", "forward_backward_ms", "optimizer_ms", "step_ms")


def stat(document: dict, key: str) -> dict | None:
    """The summary series ``key`` when it holds at least one value."""
    series = document.get("summary", {}).get(key)
    return series if isinstance(series, dict) and series.get("n") else None


def mean(document: dict, key: str) -> float | None:
    series = stat(document, key)
    return series["mean"] if series else None


def world_size(document: dict) -> int | None:
    """The world the run had; for a failure, the one it was launched with."""
    size = document.get("environment", {}).get("world_size")
    if size is not None:
        return size
    launch = document.get("config", {}).get("launch", {})
    if "nproc_per_node" in launch and "nnodes" in launch:
        return launch["nproc_per_node"] * launch["nnodes"]
    return None


def layout_label(document: dict) -> str:
    """The run's parallel layout, e.g. ``dp2·tp2`` (data parallel over the world before layouts)."""
    layout = document.get("environment", {}).get("layout") or {}
    return layout.get("label") or f"dp{world_size(document) or 1}"


def model_dims(label: str) -> str:
    """The layout's dimensions beyond data-parallel sharding (``tp2`` of ``dp2·tp2``)."""
    return "·".join(part for part in label.split("·") if not part.startswith("dp"))


def global_batch(document: dict) -> int | None:
    """Sequences per optimizer step over all data-parallel ranks."""
    trials = document.get("trials") or []
    seq_len = document.get("config", {}).get("model", {}).get("seq_len")
    return trials[0]["tokens_per_step"] // seq_len if trials and seq_len else None


def peak_memory_key(document: dict) -> str:
    """CUDA's allocated peak where the run had one, else the process's peak RSS."""
    cuda = "cuda_max_allocated_bytes"
    return cuda if stat(document, cuda) else "peak_rss_bytes"


def std(document: dict, key: str) -> float | None:
    series = stat(document, key)
    return series["std"] if series else None


def gradient_sync(document: dict) -> tuple[str | None, str | None]:
    """(requested, effective) gradient-sync mode; effective is what the strategy resolved."""
    requested = document.get("config", {}).get("training", {}).get("gradient_sync_mode")
    details = (document.get("strategy_details") or {}).get("gradient_sync_mode") or {}
    return requested, details.get("resolved")


def train_record(document: dict) -> dict:
    """Every column a train row shows, unformatted (None where unknown)."""
    config = document.get("config", {})
    throughput = stat(document, "tokens_per_s")
    summary = document.get("summary", {})
    requested, effective = gradient_sync(document)
    memory = peak_memory_key(document)
    return {
        "strategy": config.get("strategy"),
        "torch_threads": document.get("environment", {}).get("torch_threads"),
        "strategy_options": config.get("strategy_options") or {},
        "gradient_sync_requested": requested,
        "gradient_sync_mode": effective,
        "gradient_syncs_per_step": mean(document, "gradient_syncs_per_step"),
        "world_size": world_size(document),
        "layout": layout_label(document),
        "global_batch": global_batch(document),
        "precision": config.get("training", {}).get("precision"),
        "status": document.get("status"),
        "error": document.get("error"),
        "trials": summary.get("trials"),
        "single_run": summary.get("single_run"),
        **{key: mean(document, key) for key in PHASE_KEYS},
        "step_ms_std": std(document, "step_ms"),
        "tokens_per_s": throughput["mean"] if throughput else None,
        "tokens_per_s_std": throughput["std"] if throughput else None,
        "tokens_per_s_cv": throughput["cv"] if throughput else None,
        "noisy": bool(throughput and throughput["noisy"]),
        "mfu": mean(document, "mfu"),
        "peak_memory_bytes": mean(document, memory),
        "peak_memory_bytes_std": std(document, memory),
        "model_state_bytes": mean(document, "model_state_bytes_per_rank"),
    }


def tokens_trained(document: dict) -> int:
    """Tokens the measured steps of every trial consumed."""
    return sum(t["tokens_per_step"] * len(t["steps"]) for t in document.get("trials", []))


def peak_memory_per_rank(document: dict) -> list[int]:
    """Each rank's peak over the trials (CUDA allocated where present, else RSS)."""
    key = peak_memory_key(document)
    ranks: dict[int, int] = {}
    for trial in document.get("trials", []):
        for rank in trial["per_rank"]:
            value = rank["memory"].get(key) or 0
            ranks[rank["rank"]] = max(ranks.get(rank["rank"], 0), value)
    return [ranks[r] for r in sorted(ranks)]


def checkpoint_record(document: dict) -> dict:
    """Checkpoint saves and resume of the run: top-level, else rank 0's record; {} if none."""
    record = document.get("checkpoint")
    if isinstance(record, dict):
        return record
    for trial in document.get("trials", []):
        for rank in trial["per_rank"]:
            if isinstance(rank.get("checkpoint"), dict):
                return rank["checkpoint"]
    return {}


def options_text(options: dict) -> str:
    """Strategy options as ``name=value`` pairs, sorted; empty when there are none."""
    return ", ".join(f"{k}={v}" for k, v in sorted(options.items()))


def sync_text(record: dict) -> str | None:
    """The effective gradient-sync mode, and the requested one when it differs: ``last (auto)``."""
    effective, requested = record["gradient_sync_mode"], record["gradient_sync_requested"]
    if effective is None:
        return None
    return effective if requested in (None, effective) else f"{effective} ({requested})"


def variant_label(record: dict) -> str:
    """Strategy, options and effective sync mode, as plots name a row: ``ddp [sync last]``."""
    sync = record["gradient_sync_mode"]
    extras = [options_text(record["strategy_options"]), sync and f"sync {sync}"]
    shown = "; ".join(e for e in extras if e)
    return f"{record['strategy']} [{shown}]" if shown else str(record["strategy"])
