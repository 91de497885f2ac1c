"""The planner checked against the real runs: predicted against measured for many layouts.

Run as ``python benchmarks/planning.py --output results/plan-verification.json`` (the nox
session ``bench`` runs it). For each workload below it measures a device profile on this
machine (``mtb plan calibrate``), plans every layout (``mtb plan``) and runs the named
layouts plus the plan's best and a few spread through its ranking (``--verify``), on CPU
ranks over gloo. The table pools every verified layout: predicted and measured step time
and peak memory per rank, their relative errors, and the model-state error; the summary
gives each figure against the targets the planner was asked to meet (median step-time error
<= 15 %, worst <= 35 %, peak memory <= 10 %, model states <= 1 %, rank correlation >= 0.8
within each plan, predicted best within 5 % of the measured best). Every plan document,
its matrix and the profiles stay under ``--keep`` with an evidence manifest, for
``mtb report``.
"""

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

from harness import start_provenance, write_table_document
from rich.console import Console
from rich.table import Table

from mtb_plan import verify

#: (name, preset, ranks per node, global batch, (steps, warmup), layouts verified besides
#: the plan's picks). tiny's steps take tens of milliseconds on shared cores, where a few
#: slowed steps move a median of five: thirty steps cost a second or two more per run
PLANS = (
    (
        "small-2",
        "small",
        2,
        4,
        (8, 3),
        (
            "ddp mb2",
            "fsdp mb2",
            "zero2 mb2",
            "nd tp2 mb4",
            "nd pp2 gpipe m2 mb4",
            "nd pp2 1f1b m4 mb4",
            "ddp mb2 ac",
        ),
    ),
    (
        "tiny-4",
        "tiny",
        4,
        8,
        (30, 5),
        (
            "ddp mb2",
            "fsdp mb2",
            "zero1 mb2",
            "nd dp2·tp2 mb4",
            "nd dp2·pp2 1f1b m4 mb4",
            "nd rep2·dp2 mb2",
            "nd rep2·pp2 1f1b m2 mb4 ac",
            "nd tp2·pp2 1f1b m2 mb8 ac",
            "zero3 mb1 ×2 ac",
        ),
    ),
    ("tiny-moe-2", "tiny-moe", 2, 4, (30, 5), ("ddp ep2 mb2", "fsdp ep2 mb2", "ddp mb2")),
)
TARGETS = verify.TARGETS


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/plan-verification.json")
    parser.add_argument("--keep", default="results/plan-verification", help="plans and runs")
    parser.add_argument("--plans", default=",".join(name for name, *_ in PLANS))
    parser.add_argument("--top", type=int, default=2, help="the plan's best layouts run")
    parser.add_argument("--spread", type=int, default=2, help="layouts spread through the rest")
    parser.add_argument(
        "--repeats", type=int, default=3, help="calibrate's runs of each fixed-cost measurement"
    )
    return parser.parse_args(argv)


def mtb(*args) -> None:
    command = [sys.executable, "-m", "mtb", *map(str, args)]
    print("$", " ".join(command[2:]), flush=True)
    subprocess.run(command, check=True, timeout=3600)


def run_plan(args, keep: Path, name, preset, ranks: int, batch: int, steps, named) -> dict:
    """Calibrate for the workload, then plan and verify; the plan document (an earlier
    invocation's, when ``--keep`` holds it: delete the folder to measure everything again)."""
    output = keep / f"plan-{name}.json"
    if output.exists() and json.loads(output.read_text()).get("verification"):
        return json.loads(output.read_text())
    profile = keep / f"profile-{name}.toml"
    if not profile.exists():
        mtb(
            "plan", "calibrate", "--preset", preset, "--micro-batch", "1,2,4",
            "--nproc-per-node", f"1,{ranks}", "--device", "cpu", "--output", profile,
            "--repeats", args.repeats,
        )  # fmt: skip
    verify = ["--verify", args.top, "--spread", args.spread]
    for label in named:
        if not label.startswith("zero") or importlib.util.find_spec("deepspeed"):
            verify += ["--verify-layout", label]
    mtb(
        "plan", "--profile", profile, "--preset", preset, "--global-batch", batch,
        "--devices-per-node", ranks, *verify, "--steps", steps[0],
        "--warmup-steps", steps[1], "--verify-dir", keep / f"verify-{name}",
        "--output", output,
    )  # fmt: skip
    return json.loads(output.read_text())


def rows_of(name: str, document: dict) -> list[dict]:
    rows = []
    for layout in document["layouts"]:
        measured, error = layout.get("measured"), layout.get("error")
        if not measured:
            continue
        predicted = layout["predicted"]
        rows.append(
            {
                "plan": name,
                "layout": layout["label"],
                "rank": layout["rank"],
                "status": measured["status"],
                "predicted_step_ms": predicted["step_time_ms"],
                "measured_step_ms": measured.get("step_time_ms"),
                "step_time_error": error and error["step_time"],
                "predicted_peak_bytes": predicted["peak_memory_bytes"],
                "measured_peak_bytes": measured.get("peak_memory_bytes"),
                "peak_memory_error": error and error["peak_memory"],
                "model_state_error": error and error["model_state"],
                "dominant": predicted["dominant"],
            }
        )
    return rows


def pooled(rows: list[dict], plans: dict) -> dict:
    """The pooled errors, and per plan the rank correlation and the best layout's gap."""
    ok = [row for row in rows if row["step_time_error"] is not None]
    step = [abs(row["step_time_error"]) for row in ok]
    memory = [abs(row["peak_memory_error"]) for row in ok if row["peak_memory_error"] is not None]
    states = [abs(row["model_state_error"]) for row in ok if row["model_state_error"] is not None]
    verifications = {name: document["verification"] for name, document in plans.items()}
    figures = {
        "layouts": len(ok),
        "median_abs_step_time_error": statistics.median(step),
        "max_abs_step_time_error": max(step),
        "median_abs_peak_memory_error": statistics.median(memory),
        "max_abs_peak_memory_error": max(memory),
        "max_abs_model_state_error": max(states),
        "spearman": min(
            (v["spearman"] for v in verifications.values() if v["spearman"] is not None),
            default=None,
        ),
        "best_gap": max(v["best_gap"] for v in verifications.values()),
        "median_abs_step_time_error_per_plan": {
            name: v["median_abs_step_time_error"] for name, v in verifications.items()
        },
    }
    met = {name: verify.met(name, figures[name]) for name in TARGETS}
    return {**figures, "per_plan": verifications, "targets": TARGETS, "met": met}


def print_table(rows: list[dict], summary: dict) -> None:
    table = Table(title="mtb plan: predicted against measured (CPU ranks, gloo)")
    for column in ("plan", "layout", "rank", "pred ms", "meas ms", "err", "pred MiB", "meas MiB"):
        table.add_column(column, justify="left" if column in ("plan", "layout") else "right")
    table.add_column("mem err", justify="right")
    for row in rows:
        table.add_row(
            row["plan"],
            row["layout"],
            str(row["rank"]),
            f"{row['predicted_step_ms']:.1f}",
            _number(row["measured_step_ms"], "{:.1f}", row["status"]),
            _number(row["step_time_error"], "{:+.1%}"),
            f"{row['predicted_peak_bytes'] / 2**20:.0f}",
            _number(row["measured_peak_bytes"] and row["measured_peak_bytes"] / 2**20, "{:.0f}"),
            _number(row["peak_memory_error"], "{:+.1%}"),
        )
    console = Console(width=140)
    console.print(table)
    for name, target in TARGETS.items():
        verdict = {True: "met", False: "MISSED", None: "not measured"}[summary["met"][name]]
        value = "n/a" if summary[name] is None else f"{summary[name]:.3f}"
        console.print(f"{name}: {value} (target {target}) {verdict}")


def _number(value, form: str, fallback: str = "") -> str:
    return fallback if value is None else form.format(value)


def main(argv=None) -> int:
    args = parse_args(argv)
    begun = start_provenance()
    keep = Path(args.keep)
    keep.mkdir(parents=True, exist_ok=True)
    chosen = set(args.plans.split(","))
    plans = {
        name: run_plan(args, keep, name, preset, ranks, batch, steps, named)
        for name, preset, ranks, batch, steps, named in PLANS
        if name in chosen
    }
    rows = [row for name, document in plans.items() for row in rows_of(name, document)]
    summary = pooled(rows, plans)
    print_table(rows, summary)
    mtb("evidence", "manifest", keep, "--output", keep / "manifest.json")
    write_table_document("plan-verification", args, rows, [summary], begun)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
