"""(c) Harness overhead on several ranks: mtb's ddp and fsdp against bare loops.

The verdict: per round, one interleaved run, ``mtb run`` with only the
strategies plugin and ``bench_interleaved`` loaded, which takes a bare step
(the model wrapped as mtb's strategy wraps it, its own AdamW and data) after
each of mtb's steps in the same ranks. Paired step by step, both sides share
the processes, the cores and the moment; rank 0 stamps each bare step's start
and end, and the gaps between bare steps are mtb's steps.

The cross-check: whole runs alternating (bare, mtb, bare, mtb, ...), each its
own launch of N gloo ranks on CPU with the same OMP_NUM_THREADS and the same
RunConfig: the bare side is ``torchrun bare_distributed.py``, the mtb side
``mtb run`` with a timestamp observer (``bench_stamps``). On a shared machine
whole runs move by more than the 2 % being tested. Rates and the per-round
verdict are those of (a) (:func:`harness.compare_rounds`). Start-up is not in
the window.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import compare_rounds, interval_rates, rates

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
        raise SystemExit(f"bench: {' '.join(map(str, command[:6]))} ... failed: {_cause(done)}")


def _cause(done) -> str:
    """The line that says why: torchrun ends its report with a rule of ``=``, not a reason."""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip().strip("=")]
    raised = [line for line in lines if re.match(r"[\w.]+(Error|Exception): \S", line)]
    if raised:  # a rank's own exception, as its traceback ends
        return raised[0]
    exits = [line for line in lines if "exitcode" in line]
    return (exits or lines or ["no output"])[-1]


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


def mtb_with_observer(args, config, tmp: Path, observer: str) -> tuple[dict, object]:
    """``mtb run`` of ``config`` with only the strategies plugin and the benchmark's
    ``observer`` module loaded: its first trial, and what the observer wrote."""
    from mtb import api

    toml, stamps = tmp / f"{observer}.toml", tmp / f"{observer}.json"
    toml.write_text(api.config_to_toml(config))
    env = child_env(
        args,
        MTB_LOAD_PLUGINS="strategies",
        MTB_PLUGIN_MODULES=observer,
        MTB_BENCH_STAMPS=str(stamps),
    )
    _run([sys.executable, "-m", "mtb", "run", "--config", toml, "--overwrite"], env)
    trial = json.loads(Path(config.output).read_text())["trials"][0]
    return trial, json.loads(stamps.read_text())


def reported(trial: dict) -> dict:
    """What mtb's result says of its run, beside the benchmark's own rates."""
    return {
        "reported_tokens_per_s": trial["tokens_per_s"],
        "final_loss": trial["steps"][-1]["loss"],
    }


def run_mtb(args, config, tmp: Path) -> dict:
    trial, ends = mtb_with_observer(args, config, tmp, "bench_stamps")
    return {**rates(ends, config.training.warmup_steps, tokens_per_step(config)), **reported(trial)}


def run_interleaved(args, config, tmp: Path) -> tuple[dict, dict]:
    """One ``mtb run`` with a bare step after each of its steps (``bench_interleaved``): the
    bare side's rates and mtb's, from the same processes at the same moments.

    mtb's step k runs from the end of bare step k-1 to the start of bare step k
    (its loop's own work between steps included), bare step k from its start
    to its end.
    """
    trial, done = mtb_with_observer(args, config, tmp, "bench_interleaved")
    bare_ms, mtb_ms = interleaved_intervals(done["stamps"], config.training.warmup_steps)
    tokens = tokens_per_step(config)
    bare = {**interval_rates(bare_ms, tokens), "final_loss": done["final_loss"]}
    return bare, {**interval_rates(mtb_ms, tokens), **reported(trial)}


def interleaved_intervals(stamps: list, warmup: int) -> tuple[list[float], list[float]]:
    """The measured steps' milliseconds of each side from the bare steps' (start, end):
    bare step k from its start to its end, mtb's step k from the end of bare step k-1 to
    the start of bare step k (the first ``warmup`` of each left out)."""
    if warmup < 1:
        raise ValueError("mtb's first measured step starts at the end of a warmup bare step")
    starts, ends = zip(*stamps, strict=True)
    bare = [(end - start) * 1e3 for start, end in zip(starts, ends, strict=True)]
    mtb = [(start - end) * 1e3 for start, end in zip(starts[1:], ends, strict=False)]
    return bare[warmup:], mtb[warmup - 1 :]


def measure_strategy(args, strategy: str, target: float, console) -> dict:
    """Rounds of the interleaved run (the verdict) and, unless skipped, of whole runs."""
    from mtb import api

    sides: dict[str, list] = {"interleaved bare": [], "interleaved mtb": []}
    if not args.skip_whole_runs:
        sides.update({"bare": [], "mtb": []})
    with tempfile.TemporaryDirectory(prefix="mtb-bench-") as tmp:
        config = make_config(args, strategy, str(Path(tmp) / "run.json"))
        for index in range(args.rounds):
            for side, outcome in _one_round(args, config, Path(tmp)):
                outcome["round"] = index
                sides[side].append(outcome)
                console.print(
                    f"  {strategy} round {index + 1}/{args.rounds} {side:>16}: "
                    f"{outcome['tokens_per_s_median_step']:,.1f} tokens/s (median step), "
                    f"{outcome['tokens_per_s']:,.1f} (total time)"
                )
    whole = None
    if not args.skip_whole_runs:
        whole = compare_rounds(sides["bare"], sides["mtb"], target)
    return {
        "strategy": strategy,
        "nproc": args.nproc,
        "config": api.config_to_dict(config),
        **compare_rounds(sides["interleaved bare"], sides["interleaved mtb"], target),
        "whole_runs": whole,
    }


def _one_round(args, config, tmp: Path):
    """(side, outcome) of one round: whole bare and mtb runs (unless skipped), then the
    interleaved run."""
    if not args.skip_whole_runs:
        for side, run in (("bare", run_bare), ("mtb", run_mtb)):
            started = time.perf_counter()
            outcome = run(args, config, tmp)
            yield side, {**outcome, "wall_s": time.perf_counter() - started}
    bare, mtb = run_interleaved(args, config, tmp)
    yield "interleaved bare", bare
    yield "interleaved mtb", mtb


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
    """Rows per strategy: median-step tokens/s of each side and the paired ratios,
    interleaved (the verdict) and of whole runs."""
    from rich.table import Table

    table = Table(title="(c) tokens/s, median step, over rounds (p50 of each side)")
    columns = ("strategy", "ranks", "compared", "bare", "mtb", "mtb / bare per round", "median")
    for column in columns:
        table.add_column(column, justify="left" if column in columns[:3] else "right")
    for name, part in distributed.items():
        for compared, figures in (("interleaved", part), ("whole runs", part["whole_runs"])):
            if figures is None:
                continue
            table.add_row(
                name,
                str(part["nproc"]),
                compared,
                f"{figures['bare']['tokens_per_s_median_step']['p50']:,.1f}",
                f"{figures['mtb']['tokens_per_s_median_step']['p50']:,.1f}",
                ", ".join(f"{r:.3f}" for r in figures["pair_ratios"]),
                f"{figures['ratio']:.3f}",
            )
            if not figures["same_final_loss"]:
                console.print(
                    f"[red]warning: {name} ({compared}): mtb and the bare loop ended "
                    "on different losses"
                )
    console.print(table)
