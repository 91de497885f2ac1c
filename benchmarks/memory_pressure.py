"""The memory-pressure matrix scaled to this machine: which strategies fit a per-rank cap.

Run as ``python benchmarks/memory_pressure.py --output results/memory-pressure.json``
(the nox session ``bench`` runs it last). It runs the shipped
``memory-pressure`` matrix through ``mtb matrix run`` with its rank count and
cap overridden (default 2 CPU ranks, 2.5 GiB each) and its work per cell cut
to 2 steps of 128-token sequences (model states, which decide what fits, do
not depend on either). Measured here: ``small`` fits ddp and fsdp,
``medium`` fits fsdp but not ddp's replicated states, ``large`` and
``stress`` fail while the model is built; the ZeRO stages run out on
DeepSpeed's default 5e8-element communication buckets (2 GB fp32 buffers),
not on model states. It prints one row per cell (status, error class,
measured model-state bytes, the analytic estimate and its error, peak RSS)
and writes the matrix document with the run's settings and wall time.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from mtb.api import format_size, write_atomic


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/memory-pressure.json")
    parser.add_argument("--nproc", type=int, default=2, help="ranks per cell")
    parser.add_argument("--cap", default="2.5GiB", help="--memory-limit-per-rank of every cell")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--steps", type=int, default=2, help="steps per cell, 1 of them warmup")
    parser.add_argument("--output-dir", default="results/matrix-memory-pressure-bench")
    parser.add_argument("--timeout", type=float, default=900, help="per cell")
    return parser.parse_args(argv)


def table(matrix: dict, args) -> Table:
    out = Table(title=f"memory pressure: {args.nproc} CPU ranks, {args.cap} per rank")
    columns = (
        "preset",
        "strategy",
        "status",
        "error class",
        "model state",
        "estimate",
        "est. error",
        "peak RSS",
        "s",
    )
    for column in columns:
        out.add_column(column, justify="left" if column in columns[:4] else "right")
    for row in matrix["cells"]:
        error = row.get("model_state_estimate_error")
        out.add_row(
            row["preset"] or "",
            row["strategy"] or "",
            row["status"],
            row.get("error_class") or "-",
            format_size(row.get("model_state_bytes")),
            format_size(row.get("model_state_estimate_bytes")),
            "n/a" if error is None else f"{error * 100:+.2f} %",
            format_size(row.get("peak_rss_bytes") or row.get("process_peak_rss_bytes")),
            f"{row.get('duration_s', 0):.0f}",
        )
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    overrides = {
        "nproc_per_node": args.nproc,
        "memory_limit_per_rank": args.cap,
        "seq_len": args.seq_len,
        "steps": args.steps,
        "timeout": f"{args.timeout:g}",
    }
    cmd = [sys.executable, "-m", "mtb", "matrix", "run", "--preset", "memory-pressure"]
    for key, value in overrides.items():
        cmd += ["--set", f"{key}={value}"]
    cmd += ["--output-dir", str(out_dir), "--resume"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    matrix_path = out_dir / "matrix.json"
    if not matrix_path.exists():
        print(done.stderr, file=sys.stderr)
        return 1
    matrix = json.loads(matrix_path.read_text())
    Console(width=160).print(table(matrix, args))
    result = {
        "kind": "bench_memory_pressure",
        "settings": vars(args),
        "wall_s": round(time.monotonic() - started, 1),
        "matrix": matrix,
    }
    write_atomic(args.output, json.dumps(result, indent=2) + "\n")
    print(f"written to {args.output}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
