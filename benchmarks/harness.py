"""What the benchmark scripts share: one ``mtb`` command in a subprocess, its result read
back; throughput from step timestamps; mtb-against-bare rounds reduced to a verdict; the
table's rows and their runs written as one result document."""

import json
import statistics
import subprocess
import sys
from pathlib import Path


def run_mtb(bench: str, args: list[str], out: Path, timeout_s: float) -> dict:
    """``python -m mtb ARGS --output OUT``; its result document, or exit naming ``bench``."""
    cmd = [sys.executable, "-m", "mtb", *args, "--output", str(out)]
    print("running", " ".join(cmd[3:]), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 60)
    if done.returncode != 0:
        raise SystemExit(f"{bench} bench: run failed: {done.stderr.strip()[-500:]}")
    return json.loads(out.read_text())


def rates(step_ends: list[float], warmup: int, tokens_per_step: int) -> dict:
    """Throughput of the measured steps from the end timestamps of every step.

    Interval k runs from the end of step k-1 to the end of step k, so the
    intervals of the measured steps tile the whole measured window, work
    between steps included. ``tokens_per_s`` is total tokens over total time
    (mtb's own definition); ``tokens_per_s_median_step`` uses the median
    interval, which a few steps slowed by other processes do not move.
    """
    if warmup < 1:
        raise ValueError("the window needs at least one warmup step to start from")
    intervals = [b - a for a, b in zip(step_ends[warmup - 1 :], step_ends[warmup:], strict=False)]
    return interval_rates([i * 1000.0 for i in intervals], tokens_per_step)


def interval_rates(intervals_ms: list[float], tokens_per_step: int) -> dict:
    """The rates of :func:`rates` from the measured steps' intervals themselves."""
    return {
        "tokens_per_s": tokens_per_step * len(intervals_ms) * 1e3 / sum(intervals_ms),
        "tokens_per_s_median_step": tokens_per_step * 1e3 / statistics.median(intervals_ms),
        "step_interval_ms": intervals_ms,
    }


def bare_optimizer_and_data(config, model, **data_options) -> tuple:
    """AdamW and synthetic tokens as mtb sets them up from ``config``, for a bare loop."""
    import torch

    from mtb.api import SyntheticTokens

    training = config.training
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=training.lr, weight_decay=training.weight_decay
    )
    data = SyntheticTokens(
        vocab_size=config.model.vocab_size,
        seq_len=config.model.seq_len,
        micro_batch_size=config.data.micro_batch_size,
        seed=config.data.seed,
        **data_options,
    )
    return optimizer, data


def stats(values: list[float]) -> dict:
    from mtb.api import summarize

    return summarize(values)


def compare_rounds(bare_rounds: list, mtb_rounds: list, target: float) -> dict:
    """Per-round pairs (a bare run, then the mtb run right after it) reduced to the verdict.

    The verdict is the median over rounds of mtb / bare on the median-step
    rate (robust to a few steps slowed by other processes); the total-time
    rate is kept next to it.
    """

    def side(rounds: list, extra: tuple = ()) -> dict:
        keys = ("tokens_per_s", "tokens_per_s_median_step", *extra)
        return {"rounds": rounds, **{key: stats([r[key] for r in rounds]) for key in keys}}

    def ratios(key: str) -> list[float]:
        return [m[key] / b[key] for m, b in zip(mtb_rounds, bare_rounds, strict=True)]

    median_step_ratios = ratios("tokens_per_s_median_step")
    total_time_ratios = ratios("tokens_per_s")
    ratio = statistics.median(median_step_ratios)
    return {
        "bare": side(bare_rounds),
        "mtb": side(mtb_rounds, ("reported_tokens_per_s",)),
        "pair_ratios": median_step_ratios,
        "pair_ratios_total_time": total_time_ratios,
        "ratio": ratio,
        "ratio_total_time": statistics.median(total_time_ratios),
        "target_ratio": target,
        "pass": ratio >= target,
        "same_final_loss": all(
            abs(m["final_loss"] - b["final_loss"]) <= 1e-4 * max(1.0, abs(b["final_loss"]))
            for m, b in zip(mtb_rounds, bare_rounds, strict=True)
        ),
    }


def start_provenance() -> dict:
    """A table bench's provenance as it starts: the code it runs, taken before it writes a
    result (a bench that refreshes committed results would find its own outputs changed)."""
    from mtb.api import document_provenance, utc_now

    return document_provenance([], started=utc_now(), finished=False)


def write_table_document(kind: str, args, rows: list[dict], results: list, begun: dict) -> None:
    """A table bench's rows and the result documents behind them, written atomically, under
    the provenance ``begun`` (:func:`start_provenance`) with the time it ended."""
    from mtb.api import result_document, utc_now, write_atomic

    provenance = {**begun, "end_utc": utc_now()}
    document = result_document(
        kind, settings=vars(args), rows=rows, results=results, provenance=provenance
    )
    write_atomic(args.output, json.dumps(document, indent=2) + "\n")
    print(f"written to {args.output}")
