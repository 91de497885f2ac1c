"""Profiler overhead: the same steps with and without the torch profiler, and trace cost.

Run as ``python benchmarks/profiling.py --output results/profiling.json`` (the
nox session ``bench`` runs it). For each strategy (``single`` on one rank,
``ddp`` on 2 CPU ranks by default) one ``mtb profile`` run measures the
unprofiled baseline and the profiled trial over the same recorded steps
(the summary's ``overhead``); the bench adds each rank's trace size and the
time to read and analyse it. Target: the profiler adds at most 50 % to the
p50 step time of the ``small`` preset.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from harness import run_mtb
from rich.console import Console
from rich.table import Table

from mtb.api import (
    analyse_trace,
    document_provenance,
    load_trace,
    result_document,
    write_atomic,
)

TARGET_OVERHEAD = 0.5


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/profiling.json")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--strategies", default="single:1,ddp:2", help="NAME:RANKS,...")
    parser.add_argument("--active-steps", type=int, default=5)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    return parser.parse_args(argv)


def mtb_profile(args, strategy: str, nproc: int, out: Path) -> dict:
    steps = args.warmup_steps + 1 + args.active_steps
    profile = [
        "profile", "--strategy", strategy, "--preset", args.preset,
        "--nproc-per-node", str(nproc), "--device", "cpu", "--steps", str(steps),
        "--warmup-steps", str(args.warmup_steps), "--profile-active", str(args.active_steps),
        "--timeout", str(args.timeout),
    ]  # fmt: skip
    return run_mtb("profiling", profile, out, args.timeout)


def trace_cost(profile: dict) -> dict:
    """Bytes of each rank's trace and seconds to load and analyse it."""
    sizes, seconds = [], []
    for name in profile["traces"]:
        path = Path(profile["directory"]) / name
        started = time.perf_counter()
        analyse_trace(load_trace(path))
        seconds.append(time.perf_counter() - started)
        sizes.append(path.stat().st_size)
    return {"trace_bytes": sizes, "analyse_s": seconds}


def measure(args, workdir: Path) -> dict:
    results = {}
    for spec in args.strategies.split(","):
        strategy, nproc = spec.split(":")
        profile = mtb_profile(args, strategy, int(nproc), workdir / f"{strategy}.json")["profile"]
        results[spec] = {
            **profile["overhead"],
            **trace_cost(profile),
            "overlap": profile["overlap"],
            "straggler_ratio": profile["straggler"].get("ratio"),
        }
    return results


def table(results: dict, args) -> Table:
    out = Table(title=f"torch profiler overhead, preset {args.preset}, CPU")
    columns = ("strategy:ranks", "baseline p50 ms", "profiled p50 ms", "overhead", "trace KB",
               "analyse s", "overlap")  # fmt: skip
    for column in columns:
        out.add_column(column, justify="right")
    for spec, r in results.items():
        overlap = r["overlap"]
        out.add_row(
            spec,
            f"{r['baseline_step_ms_p50']:,.1f}",
            f"{r['profiled_step_ms_p50']:,.1f}",
            f"{r['overhead_ratio'] * 100:+.1f} %",
            " / ".join(f"{b / 1024:,.0f}" for b in r["trace_bytes"]),
            " / ".join(f"{s:.2f}" for s in r["analyse_s"]),
            f"{overlap['ratio'] * 100:.1f} %" if overlap["status"] == "measured" else "-",
        )
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mtb-bench-profile-") as tmp:
        results = measure(args, Path(tmp))
    Console(width=120).print(table(results, args))
    worst = max(r["overhead_ratio"] for r in results.values())
    met = worst <= TARGET_OVERHEAD
    print(f"worst overhead {worst * 100:.1f} % (target <= {TARGET_OVERHEAD * 100:.0f} %: "
          f"{'met' if met else 'MISSED'})")  # fmt: skip
    document = result_document(
        "bench_profiling",
        settings=vars(args),
        results=results,
        worst_overhead_ratio=worst,
        target_overhead_ratio=TARGET_OVERHEAD,
        target_met=met,
        provenance=document_provenance([]),
    )
    write_atomic(args.output, json.dumps(document, indent=2) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
