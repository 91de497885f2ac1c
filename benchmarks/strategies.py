"""The strategy table: single, ddp, fsdp and zero1/2/3 on the same workload.

Run as ``python benchmarks/strategies.py --output results/strategies.json``
(the nox session ``bench`` runs it after bench.py). Each strategy trains the
``small`` preset through ``mtb run`` (its own launch, 2 CPU ranks over gloo;
``single`` on one process with the same global batch); the table shows
tokens/s, the step-time breakdown, measured model-state bytes per rank and the
strategy's analytic estimate. Strategies that are not installed (ZeRO without
DeepSpeed) are listed as skipped with the reason.
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

from mtb.api import build_plugin_manager

STRATEGIES = ("single", "ddp", "fsdp", "zero1", "zero2", "zero3")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/strategies.json")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=5, help="measured steps (after warmup)")
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    return parser.parse_args(argv)


def run_one(strategy: str, args, workdir: Path) -> dict:
    """One ``mtb run``; its result document, or a skipped/failed row."""
    reason = unavailable(strategy)
    if reason:
        return {"strategy": strategy, "status": "skipped", "error": reason}
    single = strategy == "single"
    nproc = 1 if single else args.nproc
    micro = args.micro_batch_size * (args.nproc if single else 1)
    out = workdir / f"{strategy}.json"
    cmd = [
        sys.executable,
        "-m",
        "mtb",
        "run",
        "--strategy",
        strategy,
        "--preset",
        args.preset,
        "--steps",
        str(args.warmup_steps + args.steps),
        "--warmup-steps",
        str(args.warmup_steps),
        "--micro-batch-size",
        str(micro),
        "--nproc-per-node",
        str(nproc),
        "--device",
        "cpu",
        "--timeout",
        str(args.timeout),
        "--output",
        str(out),
    ]
    print(f"running {strategy} ({nproc} process(es))", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 60)
    if not out.exists():
        return {"strategy": strategy, "status": "failed", "error": done.stderr.strip()[-300:]}
    return {"strategy": strategy, **json.loads(out.read_text())}


def unavailable(strategy: str) -> str | None:
    entry = build_plugin_manager().registry("strategy").items.get(strategy)
    return "not installed" if entry is None else entry.unavailable_reason


def row(doc: dict) -> dict:
    """The table's numbers from one result document."""
    if doc.get("status") != "ok":
        return {"strategy": doc["strategy"], "status": doc.get("status"), "error": doc.get("error")}
    summary = doc["summary"]
    return {
        "strategy": doc["strategy"],
        "status": "ok",
        "world_size": doc["environment"]["world_size"],
        "tokens_per_s": summary["tokens_per_s"]["mean"],
        **{
            key: summary[key]["mean"]
            for key in ("data_ms", "forward_backward_ms", "optimizer_ms", "step_ms")
        },
        "model_state_bytes_per_rank": summary["model_state_bytes_per_rank"]["mean"],
        "model_state_estimate_bytes": summary["model_state_estimate_bytes"]["total"],
        "model_state_estimate_error": summary["model_state_estimate_error"],
    }


def table(rows: list[dict], preset: str) -> Table:
    out = Table(title=f"strategies, preset {preset}, CPU (gloo)")
    for column in (
        "strategy",
        "ranks",
        "tokens/s",
        "data ms",
        "fwd+bwd ms",
        "opt ms",
        "step ms",
        "state MiB/rank",
        "estimate MiB",
        "est. error",
    ):
        out.add_column(column, justify="right")
    for r in rows:
        if r["status"] != "ok":
            out.add_row(r["strategy"], f"{r['status']}: {r['error']}", *[""] * 8)
            continue
        mib = 2**20
        out.add_row(
            r["strategy"],
            str(r["world_size"]),
            f"{r['tokens_per_s']:,.0f}",
            *(f"{r[k]:.1f}" for k in ("data_ms", "forward_backward_ms", "optimizer_ms", "step_ms")),
            f"{r['model_state_bytes_per_rank'] / mib:,.1f}",
            f"{r['model_state_estimate_bytes'] / mib:,.1f}",
            f"{r['model_state_estimate_error'] * 100:+.1f} %",
        )
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    begun = start_provenance()
    with tempfile.TemporaryDirectory(prefix="mtb-strategies-") as tmp:
        docs = [run_one(s, args, Path(tmp)) for s in args.strategies.split(",")]
    rows = [row(doc) for doc in docs]
    Console(width=160).print(table(rows, args.preset))
    write_table_document("bench-strategies", args, rows, docs, begun)
    return 0


if __name__ == "__main__":
    sys.exit(main())
