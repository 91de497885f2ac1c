"""Checkpoint cost: save and load throughput, and training time blocked, sync vs async.

Run as ``python benchmarks/checkpoint.py --output results/checkpoint.json``
(the nox session ``bench`` runs it). Three ``mtb run``s of the same workload
(``small`` preset, ddp on 2 CPU ranks by default): without checkpoints, with
a synchronous save after every step, and with ``--async-save`` after every
step; then a resume from the synchronous run's latest checkpoint measures
load throughput. Target: an async save blocks training at most 25 % as long
as a synchronous one.
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from harness import run_mtb
from rich.console import Console
from rich.table import Table

from mtb.api import document_provenance, result_document, write_atomic

TARGET_BLOCKED_RATIO = 0.25
MODES = ("none", "sync", "async")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/checkpoint.json")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--strategy", default="ddp")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps, warmup included")
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    return parser.parse_args(argv)


def mtb_run(args, out: Path, *extra: str) -> dict:
    run = [
        "run", "--strategy", args.strategy, "--preset", args.preset,
        "--nproc-per-node", str(args.nproc), "--device", "cpu", "--warmup-steps",
        str(args.warmup_steps), "--timeout", str(args.timeout), *extra,
    ]  # fmt: skip
    return run_mtb("checkpoint", run, out, args.timeout)


def measure(args, workdir: Path) -> dict:
    """Every mode's numbers, and the load measured by resuming the sync run."""
    results = {}
    for mode in MODES:
        extra = ["--steps", str(args.steps)]
        if mode != "none":
            extra += ["--checkpoint-dir", str(workdir / mode), "--save-every", "1"]
            extra += ["--keep-last", "2"] + (["--async-save"] if mode == "async" else [])
        results[mode] = mode_row(mtb_run(args, workdir / f"{mode}.json", *extra))
    resumed = mtb_run(
        args,
        workdir / "resume.json",
        *("--steps", str(args.steps + 1), "--checkpoint-dir", str(workdir / "sync")),
        *("--resume", "latest", "--save-every", "1000"),
    )
    load_s = resumed["checkpoint"]["resumed"]["load_s"]
    results["load"] = {"load_s": load_s, "load_mb_per_s": results["sync"]["bytes"] / load_s / 1e6}
    return results


def mode_row(document: dict) -> dict:
    row = {"step_ms": document["summary"]["step_ms"]["mean"]}
    record = document.get("checkpoint")
    if record is None:
        return row
    saves = record["saves"]
    bytes_per_save = statistics.mean(s["bytes"] for s in saves)
    save_s = statistics.mean(s["total_s"] for s in saves)
    return {
        **row,
        "saves": len(saves),
        "bytes": bytes_per_save,
        "blocked_s_per_save": statistics.mean(s["blocked_s"] for s in saves),
        "save_s_per_save": save_s,
        "save_mb_per_s": bytes_per_save / save_s / 1e6,
        "final_wait_s": record["final_wait_s"],
    }


def table(results: dict, args) -> Table:
    out = Table(title=f"checkpoint every step: {args.strategy}, {args.nproc} ranks, {args.preset}")
    for column in ("mode", "step ms", "blocked s/save", "save s/save", "MB/save", "save MB/s"):
        out.add_column(column, justify="right")
    for mode in MODES:
        r = results[mode]
        if mode == "none":
            out.add_row(mode, f"{r['step_ms']:,.1f}", *["-"] * 4)
            continue
        out.add_row(
            mode,
            f"{r['step_ms']:,.1f}",
            f"{r['blocked_s_per_save']:.3f}",
            f"{r['save_s_per_save']:.3f}",
            f"{r['bytes'] / 1e6:,.1f}",
            f"{r['save_mb_per_s']:,.0f}",
        )
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mtb-bench-ckpt-") as tmp:
        results = measure(args, Path(tmp))
    ratio = results["async"]["blocked_s_per_save"] / results["sync"]["blocked_s_per_save"]
    console = Console()
    console.print(table(results, args))
    load = results["load"]
    console.print(f"load: {load['load_s']:.3f} s, {load['load_mb_per_s']:,.0f} MB/s")
    verdict = "met" if ratio <= TARGET_BLOCKED_RATIO else "MISSED"
    console.print(
        f"async blocked / sync blocked = {ratio:.3f} (target <= {TARGET_BLOCKED_RATIO}: {verdict})"
    )
    document = result_document(
        "bench_checkpoint",
        settings=vars(args),
        results=results,
        async_blocked_ratio=ratio,
        target_blocked_ratio=TARGET_BLOCKED_RATIO,
        target_met=ratio <= TARGET_BLOCKED_RATIO,
        provenance=document_provenance([]),
    )
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.output, json.dumps(document, indent=2) + "\n")
    return 0 if document["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
