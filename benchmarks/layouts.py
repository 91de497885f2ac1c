"""The layout table: one global batch trained under each parallel layout.

Run as ``python benchmarks/layouts.py --output results/layouts.json`` (the nox
session ``bench`` runs it). Every layout trains the same global batch (4
sequences a step; micro-batch = 4 / data-parallel ranks) through ``mtb run``
on CPU ranks over gloo: single, ddp, fsdp, nd with tensor parallelism (tp 2,
tp 4 where the heads divide), FSDP x TP, HSDP, pipelines (GPipe and 1F1B) and
context parallelism (cp 2, alone and with FSDP). The table shows tokens/s,
step time, the model-state bytes each rank measured (with the analytic
estimate) and the activations each rank saved for backward, each as a
fraction of single's. ``tiny-long`` (4096-token sequences) runs the layouts
that split sequences or the batch: there the activations, not the weights,
are what a rank holds.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import start_provenance, write_table_document
from rich.console import Console
from rich.table import Table

GLOBAL_BATCH = 4
#: (strategy, ranks, layout flags, data-parallel ranks)
LAYOUTS = (
    ("single", 1, (), 1),
    ("ddp", 2, (), 2),
    ("nd", 2, ("--tp", "2"), 1),
    ("nd", 2, ("--tp", "2", "--sequence-parallel"), 1),
    ("ddp", 4, (), 4),
    ("fsdp", 4, (), 4),
    ("nd", 4, ("--dp-shard", "2", "--tp", "2"), 2),
    ("nd", 4, ("--dp-replicate", "2", "--dp-shard", "2"), 4),
    ("nd", 4, ("--tp", "4"), 1),
    ("nd", 2, ("--pp", "2", "--pp-schedule", "gpipe"), 1),
    ("nd", 2, ("--pp", "2", "--pp-schedule", "1f1b", "--pp-microbatches", "4"), 1),
    ("nd", 2, ("--cp", "2"), 1),
    ("nd", 4, ("--dp-shard", "2", "--cp", "2"), 2),
)
#: the long-sequence preset runs single, ddp on 2 and the layouts that split sequences or layers
LONG_PRESET = "tiny-long"
SPLITS_SEQUENCES = ("--sequence-parallel", "--pp", "--cp")
LONG_LAYOUTS = {
    index
    for index, (strategy, ranks, flags, _) in enumerate(LAYOUTS)
    if (strategy != "nd" and ranks <= 2) or any(flag in flags for flag in SPLITS_SEQUENCES)
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/layouts.json")
    parser.add_argument("--presets", default="tiny,small,tiny-long")
    parser.add_argument("--steps", type=int, default=4, help="measured steps (after warmup)")
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--max-ranks", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1200)
    return parser.parse_args(argv)


def run_one(preset: str, layout: tuple, args, workdir: Path) -> dict:
    """One ``mtb run`` of ``layout``; its result document, or a failed row."""
    strategy, ranks, flags, dp = layout
    out = workdir / f"{preset}-{strategy}-{ranks}-{'-'.join(flags)}.json"
    cmd = [
        *(sys.executable, "-m", "mtb", "run", "--strategy", strategy, "--preset", preset),
        *("--steps", str(args.warmup_steps + args.steps)),
        *("--warmup-steps", str(args.warmup_steps), "--device", "cpu"),
        *("--micro-batch-size", str(GLOBAL_BATCH // dp), "--nproc-per-node", str(ranks)),
        *("--timeout", str(args.timeout), "--output", str(out), *flags),
    ]
    print(f"running {preset} {strategy} {' '.join(flags)} on {ranks}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 60)
    if not out.exists():
        return {"status": "failed", "error": done.stderr.strip()[-300:]}
    return json.loads(out.read_text())


def row(preset: str, layout: tuple, doc: dict) -> dict:
    """The table's numbers from one result document."""
    strategy, ranks = layout[:2]
    base = {"preset": preset, "strategy": strategy, "ranks": ranks}
    if doc.get("status") != "ok":
        return {**base, "status": doc.get("status"), "error": doc.get("error")}
    summary = doc["summary"]
    return {
        **base,
        "status": "ok",
        "layout": layout_label(doc),
        "sequence_parallel": doc["config"]["parallel"]["sequence_parallel"],
        "tokens_per_step": doc["trials"][0]["tokens_per_step"],
        "tokens_per_s": summary["tokens_per_s"]["mean"],
        "step_ms": summary["step_ms"]["mean"],
        "model_state_bytes_per_rank": summary["model_state_bytes_per_rank"]["mean"],
        "model_state_estimate_bytes": summary["model_state_estimate_bytes"]["total"],
        "activation_bytes_per_rank": summary["activation_saved_bytes_per_rank"]["mean"],
        "tp_collectives_per_step": doc["strategy_details"].get("tp_collectives_per_step"),
    }


def layout_label(doc: dict) -> str:
    """The layout's label, with a pipeline's schedule and micro-batches (pp2 1f1b m4)."""
    label, parallel = doc["environment"]["layout"]["label"], doc["config"]["parallel"]
    if parallel["pp"] == 1:
        return label
    microbatches = doc["strategy_details"]["pipeline"]["microbatches"]
    return f"{label} {parallel['pp_schedule']} m{microbatches}"


def with_fractions(rows: list[dict]) -> list[dict]:
    """Each row's model state and activations per rank as fractions of single's (same preset)."""
    single = {r["preset"]: r for r in rows if r["strategy"] == "single" and r["status"] == "ok"}
    for r in rows:
        base = single.get(r["preset"])
        if r["status"] == "ok" and base:
            for key, fraction in (
                ("model_state_bytes_per_rank", "state_vs_single"),
                ("activation_bytes_per_rank", "activations_vs_single"),
            ):
                r[fraction] = r[key] / base[key]
    return rows


def table(rows: list[dict]) -> Table:
    out = Table(title=f"layouts, global batch {GLOBAL_BATCH} sequences, CPU (gloo)")
    columns = ("preset", "strategy", "layout", "ranks", "tokens/s", "step ms")
    for column in (*columns, "state KiB/rank", "estimate KiB", "vs single"):
        out.add_column(column, justify="right")
    for column in ("activations KiB/rank", "vs single"):
        out.add_column(column, justify="right")
    for r in rows:
        if r["status"] != "ok":
            out.add_row(r["preset"], r["strategy"], f"{r['status']}: {r['error']}", *[""] * 8)
            continue
        sp = " +sp" if r["sequence_parallel"] else ""
        out.add_row(
            r["preset"],
            r["strategy"],
            r["layout"] + sp,
            str(r["ranks"]),
            f"{r['tokens_per_s']:,.0f}",
            f"{r['step_ms']:,.1f}",
            f"{r['model_state_bytes_per_rank'] / 1024:,.1f}",
            f"{r['model_state_estimate_bytes'] / 1024:,.1f}",
            f"{r.get('state_vs_single', float('nan')):.2f}",
            f"{r['activation_bytes_per_rank'] / 1024:,.1f}",
            f"{r.get('activations_vs_single', float('nan')):.2f}",
        )
    return out


def runnable(preset: str, index: int, args) -> bool:
    """Within --max-ranks; tp 4 only where the heads divide (small's 8, not tiny's 2); the
    long preset's layouts only on it."""
    layout = LAYOUTS[index]
    if layout[1] > args.max_ranks or (preset.startswith("tiny") and "4" in layout[2][:2]):
        return False
    return index in LONG_LAYOUTS if preset == LONG_PRESET else True


def main(argv=None) -> int:
    args = parse_args(argv)
    begun = start_provenance()
    cells = [
        (p, layout)
        for p in args.presets.split(",")
        for index, layout in enumerate(LAYOUTS)
        if runnable(p, index, args)
    ]
    with tempfile.TemporaryDirectory(prefix="mtb-layouts-") as tmp:
        docs = [run_one(p, layout, args, Path(tmp)) for p, layout in cells]
    rows = with_fractions([row(p, layout, d) for (p, layout), d in zip(cells, docs, strict=True)])
    Console(width=160).print(table(rows))
    write_table_document("bench-layouts", args, rows, docs, begun)
    return 0


if __name__ == "__main__":
    sys.exit(main())
