"""mtb's own benchmarks: harness overhead and CLI start-up.

Run as ``python benchmarks/bench.py --output results/bench.json`` (the nox
session ``bench`` does exactly that). Three measurements:

(a) Harness overhead. The ``small`` preset trained by mtb's own path and by a
    bare PyTorch loop over the same model class (``mtb.model.GPT``), the same
    data (``mtb.data.SyntheticTokens``), the same optimizer (AdamW with the
    config's lr and weight decay) and the same number of warmup and measured
    steps. Rounds alternate (bare, mtb, bare, mtb, ...) so that slow drift of
    the machine (thermal state, other processes) hits both sides alike.
    Target: mtb tokens/s >= 0.98 x bare tokens/s.

(b) Start-up. Wall time of ``mtb --help`` as a subprocess, median of N runs.
    Target: 0.4 s.

(c) Harness overhead on 2 CPU ranks: ``mtb run --strategy ddp`` and ``fsdp``
    against a bare loop of the same model, data and optimizer, with the model
    wrapped as the strategy wraps it (see harness_distributed.py). The
    verdict comes from interleaved runs: one ``mtb run`` that takes a bare
    step after each of its own, in the same ranks, so that both sides share
    the moment (whole runs moved by 10 % and more from one to the next on
    this kind of machine, while mtb's own work is about 1 % of a step).
    Whole runs, alternating bare torchrun loops and ``mtb run``, are kept as a
    cross-check (``--skip-whole-runs`` leaves them out).
    Target: mtb tokens/s >= 0.98 x bare tokens/s, per strategy.

Why mtb runs in-process (``mtb.launcher.launch(config, pm)``) and not as an
``mtb run`` subprocess: a one-rank launch runs the worker in the calling
process, which is exactly what ``mtb run --strategy single`` does after
parsing its flags. In-process, both sides share one interpreter, one torch
thread pool and one allocator, so the only difference between them is what
mtb does around each step (phase clock, hooks, step records, progress bar,
data coordinates, loss read-back). A subprocess would add interpreter and
torch start-up, which is not step overhead and is measured separately in (b).

Both sides are timed the same way: a timestamp at the end of every step
(for mtb, taken in an ``mtb_step_end`` hook implementation registered by this
script). The intervals between consecutive timestamps tile the measured
window, so they include everything mtb does between steps, not only what it
times inside ``Trainer.step``. Two rates come from them: total tokens over
total time (mtb's own definition of tokens/s) and tokens per step over the
median interval. The verdict uses the median-step rate, paired per round:
on a shared machine a few steps slowed by other processes move the total
time by far more than the 2 % being tested, the median barely. mtb's own
reported tokens/s (sum of its ``step_ms``) is recorded next to both.
The 1-minute load average before and after is stored with the result: read
the numbers with it.

Exit status is 0 when the benchmark ran, whether or not a target was met
(targets are reported, not asserted); ``--check`` makes a missed target exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import bare_optimizer_and_data, compare_rounds, rates, stats

from mtb.api import hookimpl  # cheap: importing mtb does not import torch

HARNESS_TARGET_RATIO = 0.98
STARTUP_TARGET_S = 0.4


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/bench.json", help="result JSON path")
    parser.add_argument("--preset", default="small", help="model preset for (a)")
    parser.add_argument("--steps", type=int, default=20, help="measured steps per round")
    parser.add_argument(
        "--warmup-steps", type=int, default=3, help="untimed steps at the start of each round"
    )
    parser.add_argument(
        "--rounds", type=int, default=4, help="rounds per side (each round is bare, then mtb)"
    )
    parser.add_argument(
        "--startup-runs", type=int, default=10, help="timed runs of `mtb --help` for (b)"
    )
    parser.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"), help="device for (a)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads for (a) (default: torch's own choice, all cores)",
    )
    parser.add_argument(
        "--strategies",
        default="ddp,fsdp",
        type=lambda text: [name for name in text.split(",") if name],
        help="strategies for (c), comma-separated (empty: skip (c))",
    )
    parser.add_argument("--nproc", type=int, default=2, help="ranks for (c)")
    parser.add_argument("--skip-harness", action="store_true", help="skip (a)")
    parser.add_argument("--skip-startup", action="store_true", help="skip (b)")
    parser.add_argument(
        "--skip-whole-runs",
        action="store_true",
        help="in (c), only the interleaved runs (whole runs are a cross-check, not the verdict)",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a measured target is missed"
    )
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    for name in ("steps", "rounds", "startup_runs", "nproc"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup_steps < 0:
        parser.error("--warmup-steps must be >= 0")
    return args


# ---------------------------------------------------------------------------
# (a) harness overhead


def make_config(args, output: str):
    from mtb.api import resolve_config

    return resolve_config(
        flags={
            "strategy": "single",
            "preset": args.preset,
            "output": output,
            "overwrite": True,  # every launch of a comparison rewrites the same file
            "training": {
                "steps": args.warmup_steps + args.steps,
                "warmup_steps": args.warmup_steps,
                "repeat": 1,
            },
            "launch": {"device": args.device},
        }
    )


def run_bare(config) -> dict:
    """The plainest training loop over mtb's model, data and optimizer settings."""
    import torch

    from mtb.api import GPT, distributed

    device = torch.device(distributed.resolve_device_type(config.launch.device))
    cuda = device.type == "cuda"
    torch.manual_seed(config.data.seed)
    model = GPT(config.model).to(device)
    training = config.training
    optimizer, data = bare_optimizer_and_data(config, model, device=device)
    ends = []
    loss = None
    for step in range(training.steps):
        batch = data.batch(step, 0)
        loss = model(batch.inputs, batch.targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:  # the step is done when its kernels are, as mtb measures it
            torch.cuda.synchronize(device)
        ends.append(time.perf_counter())
    tokens_per_step = config.data.micro_batch_size * config.model.seq_len
    return {
        **rates(ends, training.warmup_steps, tokens_per_step),
        "final_loss": float(loss.item()),
    }


class StepTimestamps:
    """A plugin that timestamps the end of every step mtb runs (one hook call per step)."""

    def __init__(self):
        self.ends: list[float] = []

    def reset(self) -> None:
        self.ends = []

    @hookimpl
    def mtb_step_end(self, context, metrics):
        self.ends.append(time.perf_counter())


def make_plugin_manager(stamps: StepTimestamps):
    """Core's built-ins plus the timestamp plugin; installed plugins are left out.

    Third-party observer hooks would add their own cost; this measures core.
    """
    from mtb.api import build_plugin_manager

    pm = build_plugin_manager(load_entry_points=False)
    pm.register(stamps, name="bench-step-timestamps")
    return pm


def run_mtb(config, pm, stamps: StepTimestamps) -> dict:
    """mtb's one-rank path, exactly as ``mtb run --strategy single`` takes it."""
    from mtb.api import run_training

    stamps.reset()
    with contextlib.redirect_stdout(io.StringIO()):  # its summary table, printed after the steps
        document = run_training(config, pm)
    training = config.training
    trial = document["trials"][0]
    return {
        **rates(stamps.ends, training.warmup_steps, trial["tokens_per_step"]),
        "reported_tokens_per_s": trial["tokens_per_s"],
        "final_loss": trial["steps"][-1]["loss"],
        "step_ms_mean": document["summary"]["step_ms"]["mean"],
        "data_ms_mean": document["summary"]["data_ms"]["mean"],
        "forward_backward_ms_mean": document["summary"]["forward_backward_ms"]["mean"],
        "optimizer_ms_mean": document["summary"]["optimizer_ms"]["mean"],
    }


def measure_harness(args, console) -> dict:
    import torch

    from mtb.api import config_to_dict

    if args.warmup_steps < 1:
        raise SystemExit("bench: --warmup-steps must be >= 1 for the harness measurement")
    if args.threads is not None:
        torch.set_num_threads(args.threads)  # both sides share this process and its threads
    stamps = StepTimestamps()
    pm = make_plugin_manager(stamps)
    bare_rounds, mtb_rounds = [], []
    with tempfile.TemporaryDirectory(prefix="mtb-bench-") as tmp:
        config = make_config(args, str(Path(tmp) / "run.json"))
        console.print(
            f"(a) harness overhead: preset {args.preset}, {args.warmup_steps} warmup + "
            f"{args.steps} measured steps, {args.rounds} rounds per side, "
            f"{torch.get_num_threads()} torch threads"
        )
        for index in range(args.rounds):
            for side, rounds in (("bare", bare_rounds), ("mtb", mtb_rounds)):
                gc.collect()
                started = time.perf_counter()
                outcome = run_bare(config) if side == "bare" else run_mtb(config, pm, stamps)
                outcome["round"] = index
                outcome["wall_s"] = time.perf_counter() - started
                rounds.append(outcome)
                console.print(
                    f"  round {index + 1}/{args.rounds} {side:>4}: "
                    f"{outcome['tokens_per_s_median_step']:,.1f} tokens/s (median step), "
                    f"{outcome['tokens_per_s']:,.1f} (total time)"
                )
    return summarize_harness(args, config_to_dict(config), bare_rounds, mtb_rounds)


def summarize_harness(args, config: dict, bare_rounds: list, mtb_rounds: list) -> dict:
    """The rounds of (a) with the settings they ran under."""
    import torch

    return {
        "preset": args.preset,
        "config": config,
        "torch_threads": torch.get_num_threads(),
        **compare_rounds(bare_rounds, mtb_rounds, HARNESS_TARGET_RATIO),
    }


# ---------------------------------------------------------------------------
# (b) start-up


def mtb_executable() -> list[str]:
    """The installed ``mtb`` console script of this interpreter.

    The script next to ``sys.executable`` is preferred to whatever ``PATH``
    finds first: version-manager shims (pyenv) add their own start-up time.
    """
    local = Path(sys.executable).parent / "mtb"
    if local.exists():
        return [str(local)]
    found = shutil.which("mtb")
    if found:
        return [found]
    return [sys.executable, "-m", "mtb"]


def _run_quietly(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"bench: {' '.join(command)} exited {done.returncode}: {last}")


def time_command(command: list[str], runs: int) -> list[float]:
    _run_quietly(command)  # untimed: warms the page cache
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        _run_quietly(command)
        times.append(time.perf_counter() - started)
    return times


TORCH_PROBE = (
    "import sys\n"
    "from mtb.cli import make_cli\n"
    "from mtb.plugins import get_plugin_manager\n"
    "try:\n"
    "    make_cli(get_plugin_manager())(['--help'], prog_name='mtb', standalone_mode=False)\n"
    "finally:\n"
    "    print('TORCH_IMPORTED=' + str('torch' in sys.modules), file=sys.stderr)\n"
)


def torch_imported_by_help() -> bool:
    done = subprocess.run(
        [sys.executable, "-c", TORCH_PROBE], capture_output=True, text=True, check=True
    )
    return "TORCH_IMPORTED=True" in done.stderr


def measure_startup(args, console) -> dict:
    command = [*mtb_executable(), "--help"]
    console.print(f"(b) start-up: {' '.join(command)}, median of {args.startup_runs} runs")
    times = time_command(command, args.startup_runs)
    floor = time_command([sys.executable, "-c", "pass"], args.startup_runs)
    median = statistics.median(times)
    return {
        "command": command,
        "runs_s": times,
        "median_s": median,
        "stats_s": stats(times),
        "python_floor_runs_s": floor,
        "python_floor_median_s": statistics.median(floor),
        "torch_imported": torch_imported_by_help(),
        "target_s": STARTUP_TARGET_S,
        "pass": median <= STARTUP_TARGET_S,
    }


# ---------------------------------------------------------------------------
# report


def _verdict(ok: bool) -> str:
    return "[green]pass[/green]" if ok else "[red]FAIL[/red]"


def render(console, harness: dict | None, startup: dict | None, distributed: dict) -> None:
    from rich.table import Table

    if harness:
        rounds = Table(title=f"(a) tokens/s, preset {harness['preset']}, over rounds")
        for column in ("side", "rate", "median", "min", "max", "CV"):
            rounds.add_column(column, justify="left" if column in ("side", "rate") else "right")
        for label, key in (
            ("median step", "tokens_per_s_median_step"),
            ("total time", "tokens_per_s"),
        ):
            for side in ("bare", "mtb"):
                stat = harness[side][key]
                rounds.add_row(
                    "bare PyTorch" if side == "bare" else "mtb",
                    label,
                    f"{stat['p50']:,.1f}",
                    f"{stat['min']:,.1f}",
                    f"{stat['max']:,.1f}",
                    f"{stat['cv'] * 100:.1f} %" + (" noisy" if stat["noisy"] else ""),
                )
        stat = harness["mtb"]["reported_tokens_per_s"]
        rounds.add_row(
            "mtb",
            "its own step_ms",
            f"{stat['p50']:,.1f}",
            f"{stat['min']:,.1f}",
            f"{stat['max']:,.1f}",
            f"{stat['cv'] * 100:.1f} %" + (" noisy" if stat["noisy"] else ""),
        )
        console.print(rounds)
        for label, key in (
            ("median step", "pair_ratios"),
            ("total time", "pair_ratios_total_time"),
        ):
            values = ", ".join(f"{r:.3f}" for r in harness[key])
            console.print(f"mtb / bare per round ({label}): {values}")
        if not harness["same_final_loss"]:
            console.print("[red]warning: mtb and the bare loop ended on different losses[/red]")

    if distributed:
        from harness_distributed import render as render_distributed

        render_distributed(console, distributed)

    verdicts = Table(title="mtb benchmarks: targets")
    for column in ("measurement", "value", "target", "result"):
        verdicts.add_column(column, justify="left" if column == "measurement" else "right")
    if harness:
        verdicts.add_row(
            "tokens/s mtb / bare, median step",
            f"{harness['ratio']:.3f}",
            f">= {harness['target_ratio']:.2f}",
            _verdict(harness["pass"]),
        )
        verdicts.add_row(
            "  same, total time (noise-prone)",
            f"{harness['ratio_total_time']:.3f}",
            "",
            "",
        )
    for name, part in distributed.items():
        verdicts.add_row(
            f"tokens/s mtb / bare, {name} on {part['nproc']} ranks, interleaved",
            f"{part['ratio']:.3f}",
            f">= {part['target_ratio']:.2f}",
            _verdict(part["pass"]),
        )
    if startup:
        verdicts.add_row(
            f"mtb --help, median of {len(startup['runs_s'])} [s]",
            f"{startup['median_s']:.3f}",
            f"<= {startup['target_s']:.1f}",
            _verdict(startup["pass"]),
        )
        verdicts.add_row(
            "  python -c pass, same runs [s]",
            f"{startup['python_floor_median_s']:.3f}",
            "",
            "",
        )
        verdicts.add_row(
            "  --help imports torch",
            "yes" if startup["torch_imported"] else "no",
            "no",
            _verdict(not startup["torch_imported"]),
        )
    console.print(verdicts)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from mtb.api import (
        build_plugin_manager,
        document_provenance,
        plugin_list,
        result_document,
        utc_now,
        write_atomic,
    )

    args = parse_args(argv)
    console = Console(highlight=False)
    started = utc_now()
    load_before = os.getloadavg()
    startup = None if args.skip_startup else measure_startup(args, console)
    harness = None if args.skip_harness else measure_harness(args, console)
    distributed = {}
    if args.strategies:
        from harness_distributed import measure_distributed

        distributed = measure_distributed(args, HARNESS_TARGET_RATIO, console)
    render(console, harness, startup, distributed)

    plugins = plugin_list(build_plugin_manager(load_entry_points=False))
    checks = [m["pass"] for m in (harness, startup, *distributed.values()) if m is not None]
    if startup is not None:
        checks.append(not startup["torch_imported"])
    document = result_document(
        "bench",
        **{"pass": all(checks)},
        settings={k: v for k, v in vars(args).items() if k != "output"},
        targets={
            "harness_tokens_per_s_ratio_min": HARNESS_TARGET_RATIO,
            "startup_median_s_max": STARTUP_TARGET_S,
        },
        harness=harness,
        startup=startup,
        distributed=distributed,
        # other processes on the machine are the main source of noise
        load_average={"before": list(load_before), "after": list(os.getloadavg())},
        cpu_count=os.cpu_count(),
        provenance=document_provenance(plugins, started=started),
    )
    path = write_atomic(args.output, json.dumps(document, indent=2, allow_nan=False) + "\n")
    console.print(f"result written to {path}")
    return 1 if args.check and not document["pass"] else 0


if __name__ == "__main__":
    sys.exit(main())
