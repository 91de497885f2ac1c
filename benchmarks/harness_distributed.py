"""(c) Harness overhead on several ranks: mtb's ddp and fsdp against bare torchrun loops.

For each strategy, rounds alternate (bare, mtb, bare, mtb, ...). Each side is
its own launch of N gloo ranks on CPU with the same OMP_NUM_THREADS and the
same RunConfig (model, data, AdamW, warmup and measured steps): the bare side
is ``torchrun bare_distributed.py`` (the model wrapped as mtb's strategy wraps
it, nothing else), the mtb side is ``mtb run`` with only the strategies plugin
and a timestamp observer (``bench_stamps``) loaded. Rank 0 of each side
timestamps the end of every step; rates and the per-round verdict are those
of (a) (:func:`harness.compare_rounds`). Start-up is not in the window.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import compare_rounds, rates

BENCH_DIR = Path(__file__).resolve().parent


def make_config(args, strategy: str, output: str):
    from mtb import api

    return api.resolve_config(
        flags={
            "strategy": strategy,
            "preset": args.preset,
            "output": output,
            "training": {
                "steps": args.warmup_steps + args.steps,
                "warmup_steps": args.warmup_steps,
                "repeat": 1,
            },
            "launch": {"nproc_per_node": args.nproc, "device": "cpu", "timeout_s": 1800.0},
        }
    )


def child_env(args, **extra: str) -> dict:
    """The same threads and import path for both sides."""
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.nproc)
    path = os.pathsep.join(filter(None, [str(BENCH_DIR), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": path, **extra}


def _run(command: list, env: dict) -> None:
    done = subprocess.run(list(map(str, command)), env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"bench: {' '.join(map(str, command[:6]))} ... failed: {last}")


def tokens_per_step(config) -> int:
    return config.data.micro_batch_size * config.model.seq_len * config.launch.world_size


def run_bare(args, config, tmp: Path) -> dict:
    from mtb import api

    config_path, out = tmp / "config.json", tmp / "bare.json"
    config_path.write_text(json.dumps(api.config_to_dict(config)))
    script = BENCH_DIR / "bare_distributed.py"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command = [*torchrun, "--nproc-per-node", args.nproc, script, config.strategy, config_path, out]
    _run(command, child_env(args))
    done = json.loads(out.read_text())
    measured = rates(done["ends"], config.training.warmup_steps, tokens_per_step(config))
    return {**measured, "final_loss": done["final_loss"]}


def run_mtb(args, config, tmp: Path) -> dict:
    from mtb import api

    toml, stamps = tmp / "run.toml", tmp / "stamps.json"
    toml.write_text(api.config_to_toml(config))
    env = child_env(
        args,
        MTB_LOAD_PLUGINS="strategies",
        MTB_PLUGIN_MODULES="bench_stamps",
        MTB_BENCH_STAMPS=str(stamps),
    )
    _run([sys.executable, "-m", "mtb", "run", "--config", toml, "--overwrite"], env)
    trial = json.loads(Path(config.output).read_text())["trials"][0]
    ends = json.loads(stamps.read_text())
    return {
        **rates(ends, config.training.warmup_steps, tokens_per_step(config)),
        "reported_tokens_per_s": trial["tokens_per_s"],
        "final_loss": trial["steps"][-1]["loss"],
    }


def measure_strategy(args, strategy: str, target: float, console) -> dict:
    from mtb import api

    bare_rounds, mtb_rounds = [], []
    with tempfile.TemporaryDirectory(prefix="mtb-bench-") as tmp:
        config = make_config(args, strategy, str(Path(tmp) / "run.json"))
        sides = (("bare", bare_rounds, run_bare), ("mtb", mtb_rounds, run_mtb))
        for index in range(args.rounds):
            for side, rounds, run in sides:
                started = time.perf_counter()
                outcome = run(args, config, Path(tmp))
                outcome.update(round=index, wall_s=time.perf_counter() - started)
                rounds.append(outcome)
                console.print(
                    f"  {strategy} round {index + 1}/{args.rounds} {side:>4}: "
                    f"{outcome['tokens_per_s_median_step']:,.1f} tokens/s (median step), "
                    f"{outcome['tokens_per_s']:,.1f} (total time)"
                )
    return {
        "strategy": strategy,
        "nproc": args.nproc,
        "config": api.config_to_dict(config),
        **compare_rounds(bare_rounds, mtb_rounds, target),
    }


def measure_distributed(args, target: float, console) -> dict:
    """Every strategy of ``--strategies``, by name."""
    if args.warmup_steps < 1:
        raise SystemExit("bench: --warmup-steps must be >= 1 for the harness measurement")
    console.print(
        f"(c) harness overhead on {args.nproc} CPU ranks: preset {args.preset}, "
        f"{args.warmup_steps} warmup + {args.steps} measured steps, {args.rounds} rounds per side"
    )
    return {name: measure_strategy(args, name, target, console) for name in args.strategies}


def render(console, distributed: dict) -> None:
    """One row per strategy: median-step tokens/s of each side and the paired ratios."""
    from rich.table import Table

    table = Table(title="(c) tokens/s, median step, over rounds (p50 of each side)")
    for column in ("strategy", "ranks", "bare", "mtb", "mtb / bare per round", "median"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for name, part in distributed.items():
        table.add_row(
            name,
            str(part["nproc"]),
            f"{part['bare']['tokens_per_s_median_step']['p50']:,.1f}",
            f"{part['mtb']['tokens_per_s_median_step']['p50']:,.1f}",
            ", ".join(f"{r:.3f}" for r in part["pair_ratios"]),
            f"{part['ratio']:.3f}",
        )
        if not part["same_final_loss"]:
            console.print(f"[red]warning: {name}: mtb and the bare loop ended on different losses")
    console.print(table)
