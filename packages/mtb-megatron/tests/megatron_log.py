"""Megatron's stdout as ``training_log`` and ``report_memory`` print it, per release.

The lines are built from the format strings of megatron/training/training.py
(``training_log``) and megatron/training/utils.py (``report_memory``) at two
tags of NVIDIA/Megatron-LM, and the counters follow each release's rules:

- core_r0.13.0 (same lines at the tag core_v0.13.0): training.py line 1678
  prints at ``iteration % log_interval == 0``; lines 1686 and 1756-1758
  reset the interval timer and the advanced/skipped/NaN counters at every
  line; the timestamp is ``%Y-%m-%d %H:%M:%S`` (line 1700); utils.py line
  259 prints memory with ``{}`` (full float repr).
- core_v0.16.1: training.py line 2008 also prints the first iteration
  (``or is_first_iteration``); line 1797 ``should_reset = not
  is_first_iteration`` keeps the timer (line 2016) and the counters (lines
  2084-2087) running through that line; the timestamp has ``.%f`` (line
  2033); utils.py line 284 prints memory with ``:.2f``.
- core_v0.18.2 (the megatron image's release): the same lines and rules at
  other places: training.py line 2597 prints at ``iteration % log_interval
  == 0 or is_first_iteration``, line 2387 ``should_reset = not
  is_first_iteration`` (timer line 2605, counters lines 2688-2691), the
  timestamp with ``.%f`` (line 2627), the learning rate where the rank has
  one (line 2656: the last stage, which prints, does); report_memory moved
  to megatron/training/utils/common_utils.py (line 282), still ``:.2f``.
"""

#: releases whose lines print iteration 1 and stamp microseconds (core_v0.16.0 onwards)
FIRST_LINE_RELEASES = ("0.16", "0.18")

FLOP_PER_GPU_MS = 64_000.0  # TFLOP/s x ms of one iteration: 80.0 TFLOP/s at 800 ms


def iteration_line(release, iteration, train_iters, ms_per_iter, skipped, nan, batch=64):
    """One line, field by field as training_log formats it (loss fields of a GPT run)."""
    stamp = "2026-01-01 00:00:00" + (".123456" if release in FIRST_LINE_RELEASES else "")
    line = f" [{stamp}]"
    line += f" iteration {iteration:8d}/{train_iters:8d} |"
    line += f" consumed samples: {iteration * batch:12d} |"
    line += f" elapsed time per iteration (ms): {ms_per_iter:.1f} |"
    line += f" throughput per GPU (TFLOP/s/GPU): {FLOP_PER_GPU_MS / ms_per_iter:.1f} |"
    line += f" learning rate: {3e-4:.6E} |"
    line += f" global batch size: {batch:5d} |"
    line += " {}: {:.6E} |".format("lm loss", 10.0 - iteration / 100)
    line += f" loss scale: {65536.0:.1f} |"
    line += f" grad norm: {1.5:.3f} |"
    line += f" number of skipped iterations: {skipped:3d} |"
    line += f" number of nan iterations: {nan:3d} |"
    return line


def memory_line(release, rank, iteration, allocated, max_allocated, reserved, max_reserved):
    """report_memory's line for ``(after N iterations)``, values in MB."""
    values = (allocated, max_allocated, reserved, max_reserved)
    if release in FIRST_LINE_RELEASES:
        a, m, r, mr = (f"{v:.2f}" for v in values)
    else:
        a, m, r, mr = (f"{v}" for v in values)
    string = f"(after {iteration} iterations) memory (MB)"
    string += f" | allocated: {a} | max allocated: {m} | reserved: {r} | max reserved: {mr}"
    return f"[Rank {rank}] {string}"


def training_log(release, step_ms, skipped_iters=(), nan_iters=(), train_iters=50, interval=10):
    """The lines one run prints; ``step_ms(i)`` is iteration i's time."""
    lines, elapsed, counted, skipped, nan = [], 0.0, 0, 0, 0
    for iteration in range(1, train_iters + 1):
        elapsed += step_ms(iteration)
        counted += 1
        skipped += iteration in skipped_iters
        nan += iteration in nan_iters
        first = release in FIRST_LINE_RELEASES and iteration == 1
        if iteration % interval == 0 or first:
            lines.append(
                iteration_line(release, iteration, train_iters, elapsed / counted, skipped, nan)
            )
            if not first:
                elapsed, counted, skipped, nan = 0.0, 0, 0, 0
    return lines
