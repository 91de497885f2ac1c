"""Dense vs mixture-of-experts on 2 CPU ranks, at the same active parameters per token.

Run as ``python benchmarks/moe.py --output results/moe.json``. For each
pair of presets (``tiny``/``tiny-moe``, ``small``/``small-moe``: the MoE
preset swaps every second MLP for 4 experts with top-1 routing, so a token
passes through as many matmul weights) it runs ``mtb run`` with ddp and fsdp,
dense and with the experts split over both ranks (``--ep 2``), and tabulates
tokens/s, the share of the step spent in the MoE dispatch and combine
all_to_alls, and the model-state bytes per rank (measured and estimated).
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

PAIRS = (("tiny", "tiny-moe"), ("small", "small-moe"))
#: (strategy, expert parallelism) of every cell; dense presets run with ep 1
CELLS = (("ddp", 1), ("ddp", 2), ("fsdp", 1), ("fsdp", 2))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/moe.json")
    parser.add_argument("--pairs", default=",".join(dense for dense, _ in PAIRS))
    parser.add_argument("--steps", type=int, default=6, help="measured steps (after warmup)")
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900)
    return parser.parse_args(argv)


def cells(args) -> list[tuple[str, str, int]]:
    """(preset, strategy, ep) to run: dense presets at ep 1, their MoE twins at ep 1 and 2."""
    wanted = args.pairs.split(",")
    out = []
    for dense, sparse in (pair for pair in PAIRS if pair[0] in wanted):
        for strategy, ep in CELLS:
            if ep == 1:
                out.append((dense, strategy, 1))
            out.append((sparse, strategy, ep))
    return out


def run_one(preset: str, strategy: str, ep: int, args, workdir: Path) -> dict:
    """One ``mtb run`` on 2 CPU ranks; its result document, or a failed row."""
    out = workdir / f"{preset}-{strategy}-ep{ep}.json"
    cmd = [
        *(sys.executable, "-m", "mtb", "run", "--strategy", strategy, "--preset", preset),
        *("--ep", str(ep), "--nproc-per-node", "2", "--device", "cpu"),
        *("--steps", str(args.warmup_steps + args.steps), "--warmup-steps", str(args.warmup_steps)),
        *("--timeout", str(args.timeout), "--output", str(out)),
    ]
    print(f"running {preset} {strategy} ep {ep}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout + 60)
    cell = {"preset": preset, "strategy": strategy, "ep": ep}
    if not out.exists():
        return {**cell, "status": "failed", "error": done.stderr.strip()[-300:]}
    return {**cell, **json.loads(out.read_text())}


def row(doc: dict) -> dict:
    """The table's numbers from one result document."""
    cell = {key: doc[key] for key in ("preset", "strategy", "ep")}
    if doc.get("status") != "ok":
        return {**cell, "status": doc.get("status"), "error": doc.get("error")}
    summary, moe = doc["summary"], doc["summary"].get("moe", {})
    return {
        **cell,
        "status": "ok",
        "parameters": doc["model"]["parameters"],
        "active_matmul_parameters": doc["model"]["matmul_parameters"],
        "tokens_per_s": summary["tokens_per_s"]["mean"],
        "step_ms": summary["step_ms"]["mean"],
        "all_to_all_ms": moe.get("all_to_all_ms", {}).get("mean"),
        "dispatch_combine_share": moe.get("dispatch_combine_share", {}).get("mean"),
        "dropped_fraction": moe.get("dropped_fraction", {}).get("mean"),
        "model_state_bytes_per_rank": summary["model_state_bytes_per_rank"]["mean"],
        "model_state_estimate_bytes": summary["model_state_estimate_bytes"]["total"],
    }


COLUMNS = (
    "preset",
    "strategy",
    "ep",
    "params",
    "active/token",
    "tokens/s",
    "step ms",
    "a2a ms",
    "a2a share",
    "dropped",
    "state MiB/rank",
    "estimate MiB",
)


def cells_of(r: dict) -> list[str]:
    def share(value):
        return "—" if value is None else f"{value * 100:.1f} %"

    mib = 2**20
    a2a = "—" if r["all_to_all_ms"] is None else f"{r['all_to_all_ms']:.1f}"
    return [
        f"{r['parameters'] / 1e6:.2f} M",
        f"{r['active_matmul_parameters'] / 1e6:.2f} M",
        f"{r['tokens_per_s']:,.0f}",
        f"{r['step_ms']:.1f}",
        a2a,
        share(r["dispatch_combine_share"]),
        share(r["dropped_fraction"]),
        f"{r['model_state_bytes_per_rank'] / mib:,.2f}",
        f"{r['model_state_estimate_bytes'] / mib:,.2f}",
    ]


def table(rows: list[dict]) -> Table:
    out = Table(title="dense vs MoE, 2 CPU ranks (gloo)")
    for column in COLUMNS:
        out.add_column(column, justify="right")
    for r in rows:
        cell = [r["preset"], r["strategy"], str(r["ep"])]
        if r["status"] != "ok":
            out.add_row(*cell, f"{r['status']}: {r['error']}", *[""] * (len(COLUMNS) - 4))
            continue
        out.add_row(*cell, *cells_of(r))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    begun = start_provenance()
    with tempfile.TemporaryDirectory(prefix="mtb-moe-") as tmp:
        docs = [run_one(*cell, args, Path(tmp)) for cell in cells(args)]
    rows = [row(doc) for doc in docs]
    Console(width=160).print(table(rows))
    write_table_document("bench-moe", args, rows, docs, begun)
    return 0


if __name__ == "__main__":
    sys.exit(main())
