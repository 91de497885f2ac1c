"""The fixed cost of each mechanism, measured by running it at a negligible width.

A step costs more than its FLOPs, bytes and collectives: autograd, module
calls, the step's own bookkeeping, and per mechanism the work of its
machinery (FSDP's hooks and gathers, DeepSpeed's engine under ZeRO, DTensor's
redistributions under tensor parallelism, the pipeline's schedule, the
context-parallel ring's merges, activation checkpointing's recomputed operator
calls and its saved-tensor bookkeeping). On a GPU these hide behind the kernels of a
real model; on a CPU, and for any small model, they decide the step.
Calibrate measures them: the workload's layers and heads at a width where
compute is negligible (``NANO``), two ``mtb run`` per mechanism on N ranks (one
and two micro-batches a step), and what the step model predicts for each run
subtracted. ``base`` is the residual of plain data parallelism (one rank:
``single``); each other mechanism's is its run's residual less ``base`` and
less the mechanisms that run also uses (an N-D layout on 4 ranks shards the
rest with FSDP), each paid as the step model pays it: per micro-batch, by each
pipeline stage for its share of the blocks as its compute is, or once a step
(FSDP under a pipeline, since torch's pipeline stage defers its reshard and
reduction to the last backward). What the second micro-batch adds is the
mechanism's cost per micro-batch; the rest is paid once a step (the optimizer
over the parameter tensors, the loss, the last reduction's wait): on 4 ranks
sharing 2 cores, a second micro-batch of ``tiny`` on ``ddp`` adds 0.6-4 ms to a
34 ms step, where a cost counted wholly per micro-batch added 16 ms. base's
parts are work: where noise gives one the other sign it folds into the other.
A mechanism's parts are increments and may be negative; a layout's cost per
micro-batch, and its sum, are never below 0.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import attrs

from mtb.api import UsageError
from mtb_plan.layouts import Candidate, check
from mtb_plan.profile import ONE_RANK_MECHANISMS, Overhead
from mtb_plan.step_model import (
    Prediction,
    Shape,
    fixed_cost_split,
    micro_batch_compute_s,
    micro_batches_paid,
    predict,
)
from mtb_plan.verify import median_step_ms
from mtb_plan.workload import Workload

#: the workload's layers and heads, everything else negligible
NANO = {"vocab_size": 64, "seq_len": 16, "mlp_ratio": 1}
NANO_HEAD_WIDTH = 2
#: mechanism -> (strategy, mesh beyond data parallelism, micro-batch), measured in this order
LAYOUTS = {
    "base": ("ddp", {}, 1),
    "ac": ("ddp", {}, 1),
    "fsdp": ("fsdp", {}, 1),
    "rep": ("nd", {}, 1),
    "zero": ("zero2", {}, 1),
    "zero3": ("zero3", {}, 1),
    "tp": ("nd", {"tp": 2}, 1),
    "sp": ("nd", {"tp": 2, "sequence_parallel": True}, 1),
    "pp": ("nd", {"pp": 2, "pp_schedule": "1f1b", "pp_microbatches": 2}, 2),
    "cp": ("nd", {"cp": 2}, 1),
    "ep": ("ddp", {"ep": 2}, 1),
}
#: the mechanism measured on its layout with activation checkpointing on
CHECKPOINTED = "ac"
#: the mechanism whose ``nd`` layout replicates over the data-parallel ranks (FSDP over a
#: shard group of one); the others shard over them
REPLICATED = "rep"
#: mechanisms that only add work to the layout under them (checkpointing recomputes each
#: block's forward): a run that measured one cheaper than without it measured noise
ADDS_WORK = (CHECKPOINTED,)
#: steps of each fixed-cost run: a median of 20 (the runs are short; most of their time is the
#: launch), since a mechanism's two runs are subtracted
STEPS, WARMUP = 24, 4
#: runs of each measurement; the fastest median is kept: on a shared machine a whole run can
#: be slowed (one training-efficiency run came out 2.7 where the next plan's runs showed 1.3)
REPEATS = 2


@attrs.frozen
class Runs:
    """How each calibration run is launched: its time limit, and how many times it is run
    (the fastest median kept)."""

    timeout_s: float = 600.0
    repeats: int = REPEATS


def nano_overrides(workload: Workload) -> dict:
    return {**NANO, "d_model": NANO_HEAD_WIDTH * workload.n_heads}


def candidate(mechanism: str, ranks: int, micro_batches: int = 1) -> Candidate | None:
    """The run that measures ``mechanism`` on ``ranks`` ranks of one node with
    ``micro_batches`` micro-batches a step (accumulated; a pipeline's own), if it fits."""
    strategy, mesh, micro_batch = LAYOUTS[mechanism]
    checkpointing = mechanism == CHECKPOINTED
    if ranks == 1:
        return (
            Candidate(
                strategy="single",
                nproc_per_node=1,
                micro_batch_size=1,
                grad_accum_steps=micro_batches,
                activation_checkpointing=checkpointing,
            )
            if mechanism in ONE_RANK_MECHANISMS
            else None
        )
    accumulation = micro_batches
    if "pp_microbatches" in mesh:
        mesh = {**mesh, "pp_microbatches": mesh["pp_microbatches"] * micro_batches}
        micro_batch, accumulation = micro_batch * micro_batches, 1
    if strategy == "nd":
        model = mesh.get("tp", 1) * mesh.get("pp", 1) * mesh.get("cp", 1)
        if ranks % model:
            return None
        data = "dp_replicate" if mechanism == REPLICATED else "dp_shard"
        mesh = {**mesh, data: ranks // model}
    return Candidate(
        strategy=strategy,
        nproc_per_node=ranks,
        parallel=tuple(sorted(mesh.items())),
        micro_batch_size=micro_batch,
        grad_accum_steps=accumulation,
        activation_checkpointing=checkpointing,
    )


#: micro-batches a step of each mechanism's two runs
MICRO_BATCHES = (1, 2)


def measure(pm, workload: Workload, ranks: int, profile, runs: Runs, progress) -> list[Overhead]:
    """Every mechanism's fixed cost per micro-batch and per step at ``ranks`` ranks per node.

    The ``runs.repeats`` runs of each mechanism are taken in separate passes over
    all of them, so a slow stretch of a shared machine falls on one run of
    several mechanisms, not on every run of one (which then carries it into
    every layout that uses it, and with the opposite sign into the next
    mechanism measured on top of it).
    """
    overrides = nano_overrides(workload)
    layouts = {
        (mechanism, count): found
        for mechanism in LAYOUTS
        if mechanism != "ep" or workload.moe_experts
        for count in MICRO_BATCHES
        if (found := _nano_run(pm, workload, overrides, mechanism, ranks, profile, count))
        is not None
    }
    fastest: dict[tuple, float] = {}
    for attempt in range(runs.repeats):
        for (mechanism, count), (run, nano, _, _) in layouts.items():
            micro = run.grad_accum_steps * run.mesh.get("pp_microbatches", 1)
            many = "micro-batch" if micro == 1 else "micro-batches"
            pass_of = f"{micro} {many} a step, run {attempt + 1} of {runs.repeats}"
            progress(f"overhead of {mechanism} at {ranks} rank(s) per node, {pass_of}")
            seconds = _one_run_s(run, nano, profile.device, runs.timeout_s)
            fastest[mechanism, count] = min(seconds, fastest.get((mechanism, count), seconds))
    compute = profile.compute_for(ranks)
    parts: dict[str, tuple[float, float]] = {}
    for mechanism in dict.fromkeys(name for name, _ in layouts):
        fits = [(key, found) for key, found in layouts.items() if key[0] == mechanism]
        fitted = [
            _fitted(mechanism, fastest[key] - predicted_s, shape, parts, compute)
            for key, (_, _, predicted_s, shape) in fits
        ]
        parts[mechanism] = _parts(
            fitted, base=mechanism == "base", adds_work=mechanism in ADDS_WORK
        )
    return [
        Overhead(
            mechanism=name,
            ranks_per_node=ranks,
            per_micro_batch_s=per_micro,
            per_step_s=per_step,
            how=_how(name, ranks, workload, overrides, runs.repeats)
            + _figures(name, layouts, fastest),
        )
        for name, (per_micro, per_step) in parts.items()
    ]


def _figures(mechanism: str, layouts: dict, fastest: dict) -> str:
    """The runs' medians and the model's predictions for them, so that a fit can be
    checked, or made again, from the profile alone."""
    keys = [key for key in layouts if key[0] == mechanism]
    measured = " and ".join(f"{fastest[key] * 1e3:.2f}" for key in keys)
    predicted = " and ".join(f"{layouts[key][2] * 1e3:.2f}" for key in keys)
    return f"; the runs measured {measured} ms a step, the model without fixed costs {predicted}"


def _fitted(mechanism: str, residual_s: float, shape: Shape, known: dict, compute):
    """(how many times the run pays ``mechanism``'s per-micro-batch cost, what its residual
    leaves for ``mechanism``): the residual less base and the mechanisms measured before it,
    each paid as the step model pays it (per micro-batch ``paid`` times a step, or once)."""
    per_micro, once = fixed_cost_split(shape)
    paid = micro_batches_paid(shape, compute)
    used = [name for name in ("base", *per_micro, *once) if name in known and name != mechanism]
    others = sum(known[name][1] + known[name][0] * (1 if name in once else paid) for name in used)
    return (1 if mechanism in once else paid), residual_s - others


def _parts(
    fitted: list[tuple[float, float]], base: bool = False, adds_work: bool = False
) -> tuple[float, float]:
    """(per micro-batch, per step) through the runs' (times paid, cost) points: a line
    through two, all per micro-batch from one.

    ``base``'s parts are work, of its cost's sign at one micro-batch: where the line gives
    one part the other sign (noise in the difference of two runs), that part is 0 and the
    other holds the whole cost at one micro-batch. A mechanism's parts are what its layout
    costs beyond base and the mechanisms under it, and either may be below 0 (cp's ring
    replacing some of FSDP's work at one micro-batch, and costing more at two): they keep
    the line (the step model never lets a step's cost per micro-batch go below 0).

    ``adds_work`` (``ADDS_WORK``): each run's cost is at least 0, then the line, whose part
    per micro-batch, as base's, is not below 0 (else all of it is once a step). On 4 ranks
    tiny's checkpointed run at one micro-batch measured 2 ms under base's; the line through
    it priced one checkpointed micro-batch below none, and the plan ranked ``ddp mb2 ac``
    first (predicted 29.1 ms, measured 35.0; ``ddp mb2`` measured 27.5).
    """
    if adds_work:
        fitted = [(paid, max(0.0, cost)) for paid, cost in fitted]
    (paid_1, cost_1), *more = fitted
    if not more or more[0][0] == paid_1:
        return cost_1 / paid_1, 0.0
    paid_2, cost_2 = more[0]
    per_micro = (cost_2 - cost_1) / (paid_2 - paid_1)
    per_step = cost_1 - paid_1 * per_micro
    if (base or adds_work) and per_micro * cost_1 < 0:
        return 0.0, cost_1
    if base and per_step * cost_1 < 0:
        return cost_1 / paid_1, 0.0
    return per_micro, per_step


def _nano_run(pm, workload, overrides, mechanism: str, ranks: int, profile, micro_batches=1):
    """(run, its nano workload, the step model's seconds for it, its shape) of ``mechanism``'s
    calibration layout at ``micro_batches`` a step, or None where it does not fit the ranks
    or is refused."""
    run = candidate(mechanism, ranks, micro_batches)
    registry = pm.registry("strategy")
    if run is None or run.strategy not in {entry.name for entry in registry}:
        return None
    entry = next(entry for entry in registry if entry.name == run.strategy)
    shards = run.world_size // (
        run.mesh.get("tp", 1) * run.mesh.get("pp", 1) * run.mesh.get("cp", 1)
    )
    nano = Workload.of(
        workload.preset,
        run.micro_batch_size * run.grad_accum_steps * shards,
        workload.precision,
        workload.optimizer,
        overrides,
    )
    checked = check(registry, run, nano, profile.device)
    if checked.refused:
        return None
    bare = attrs.evolve(profile, overhead=())
    predicted = predict(checked, entry.item, nano, bare).step_time_ms / 1e3
    return run, nano, predicted, Shape.of(checked, entry.item)


def _step_s(run: Candidate, workload: Workload, device: str, runs: Runs) -> float:
    """The median measured step of ``mtb run`` with the candidate's options, in seconds: the
    fastest of ``runs.repeats`` runs (noise on a shared machine only ever slows a run)."""
    return min(_one_run_s(run, workload, device, runs.timeout_s) for _ in range(runs.repeats))


def _one_run_s(run: Candidate, workload: Workload, device: str, timeout_s: float) -> float:
    with tempfile.TemporaryDirectory(prefix="mtb-plan-overhead-") as folder:
        output = Path(folder) / "run.json"
        command = [sys.executable, "-m", "mtb", "run", "--preset", workload.preset]
        command += ["--steps", str(STEPS), "--warmup-steps", str(WARMUP), "--peak-tflops", "1"]
        command += ["--device", device, "--output", str(output)]
        command += _flags({**run.options(), **dict(workload.overrides)})
        command += ["--precision", workload.precision, "--optimizer", workload.optimizer]
        finished = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if finished.returncode != 0:
            last = (finished.stderr.strip().splitlines() or ["no output"])[-1]
            raise UsageError(f"calibrate: the {run.label} overhead run failed: {last}")
        return median_step_ms(json.loads(output.read_text())) / 1e3


def _flags(options: dict) -> list[str]:
    """``mtb run`` flags from option names (a matrix cell's spelling)."""
    flags = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            flags += [flag, str(value)]
    return flags


def _how(mechanism: str, ranks: int, workload: Workload, overrides: dict, repeats: int) -> str:
    _, mesh, micro_batch = LAYOUTS[mechanism]
    width = ", ".join(f"{key} {value}" for key, value in sorted(overrides.items()))
    return (
        f"mtb run of {workload.preset} at {width} ({_layout_words(mechanism)} on "
        f"{ranks} rank(s), "
        f"micro-batch {micro_batch}, median of {STEPS - WARMUP} steps, {_fastest(repeats)}, "
        f"each in its own pass over the mechanisms) at {_counts(mesh)} micro-batches a step, "
        "less the step model's prediction for each, less base and the other mechanisms it "
        "uses"
        + (", each at least 0" if mechanism in ADDS_WORK else "")
        + "; per micro-batch: what the second micro-batch adds, per step: the rest"
    )


def _layout_words(mechanism: str) -> str:
    """The strategy and mesh of ``mechanism``'s calibration layout, in words."""
    strategy, mesh, _ = LAYOUTS[mechanism]
    words = f"{strategy} {mesh}" if mesh else strategy
    if mechanism == CHECKPOINTED:
        words += " with activation checkpointing"
    if mechanism == REPLICATED:
        words += " replicated over every rank"
    return words


def _counts(mesh: dict) -> str:
    """The micro-batches a step of a mechanism's two runs, in words."""
    first = mesh.get("pp_microbatches", 1)
    return f"{first} and {first * MICRO_BATCHES[1]}"


def _fastest(repeats: int) -> str:
    return "one run" if repeats == 1 else f"the fastest of {repeats} runs"


@attrs.frozen
class FullWidth:
    """A full-width calibration run: the model's prediction for it and its measured step."""

    predicted: Prediction
    measured_ms: float
    shape: Shape
    parameters: int
    workload: Workload


def _planned(pm, workload: Workload, mechanism: str, ranks: int, profile, micro: int):
    """(run, full-width workload, checked layout, strategy) of ``mechanism``'s calibration
    layout at ``micro`` sequences per rank; None where it is refused or not installed."""
    run = candidate(mechanism, ranks)
    strategies = pm.registry("strategy")
    registry = {entry.name: entry for entry in strategies}
    if run is None or run.strategy not in registry:
        return None
    run = attrs.evolve(run, micro_batch_size=micro)
    full = Workload.of(
        workload.preset, run.world_size * micro, workload.precision, workload.optimizer
    )
    checked = check(strategies, run, full, profile.device)
    return None if checked.refused else (run, full, checked, registry[run.strategy].item)


def _full_width(pm, workload: Workload, mechanism: str, ranks: int, profile, runs: Runs, micro=1):
    """The full-width workload at ``micro`` sequences per rank on ``mechanism``'s calibration
    layout, predicted and measured (a ``FullWidth``); None where it is refused."""
    from mtb.api import rank_parameter_count

    planned = _planned(pm, workload, mechanism, ranks, profile, micro)
    if planned is None:
        return None
    run, full, checked, strategy = planned
    predicted = predict(checked, strategy, full, profile)
    measured_ms = _step_s(run, full, profile.device, runs) * 1e3
    shape = Shape.of(checked, strategy)
    parameters = rank_parameter_count(checked.config.model, shape.tp, shape.pp)
    return FullWidth(predicted, measured_ms, shape, parameters, full)


def efficiency_micro_batch(pm, workload: Workload, ranks: int, profile, micro_batches) -> int:
    """The largest of ``micro_batches`` whose base layout is predicted to fit a rank's memory
    (the smallest where none is)."""
    capacity = profile.memory_per_rank(ranks)
    for micro in sorted(micro_batches, reverse=True):
        planned = _planned(pm, workload, "base", ranks, profile, micro)
        if planned is not None:
            _, full, checked, strategy = planned
            if predict(checked, strategy, full, profile).peak_memory_bytes <= capacity:
                return micro
    return min(micro_batches)


def training_efficiency(
    pm, workload: Workload, ranks: int, profile, runs: Runs, progress, micro_batches=(1,)
) -> tuple[float, str]:
    """Measured arithmetic of the real workload in a training step over the operators' figure,
    and how it was measured ("" where the run is refused here: then 1).

    The full-width workload at the largest of ``micro_batches`` that fits (calibrate gives
    the micro-batches it timed; there the arithmetic is the largest share of the step) on
    plain data parallelism (``single`` on one rank): its measured step, less everything
    else the model predicts for it (fixed costs, operator calls, collectives, the
    optimizer), over the arithmetic (FLOPs and bytes) the operator figures predict. A
    ratio taken where the arithmetic is a small share carries the run's noise many times
    over: one sequence of ``tiny`` on 4 ranks is about a millisecond of a 25 ms step, and
    one calibration measured 7.1 where the one before measured 3.8.
    """
    micro = efficiency_micro_batch(pm, workload, ranks, profile, micro_batches)
    progress(f"training efficiency at {ranks} rank(s) per node: {workload.preset} mb{micro}")
    found = _full_width(pm, workload, "base", ranks, profile, runs, micro)
    if found is None:
        return 1.0, ""
    compute = profile.compute_for(ranks)
    arithmetic_ms = _arithmetic_ms(found, compute)
    besides_ms = found.predicted.step_time_ms - arithmetic_ms * compute.training_efficiency
    how = (
        f"; training efficiency: the full workload on plain data parallelism at micro-batch "
        f"{micro} (the largest timed that fits), its median step ({_fastest(runs.repeats)}) "
        "less the rest of the model's prediction, over its arithmetic at the operators' rates"
    )
    return max(0.5, (found.measured_ms - besides_ms) / arithmetic_ms), how


def _arithmetic_ms(found: FullWidth, compute) -> float:
    """The run's arithmetic at the operators' rates (training efficiency 1), in ms."""
    at = {
        value: micro_batch_compute_s(
            found.workload, found.shape, attrs.evolve(compute, training_efficiency=value)
        )
        for value in (0.0, 1.0)
    }
    return (at[1.0] - at[0.0]) * found.shape.accumulation * 1e3


#: mechanisms whose machinery touches every parameter each micro-batch, measured in this order
PER_BYTE = ("fsdp", "rep", "zero", "zero3", "tp")
#: the most passes over the rank's parameter bytes at the element-wise rate that a cost per
#: byte stands for: the machinery copies each byte a few times a micro-batch (into and out
#: of gather and reduce buffers, the gradient), and the largest measured where the bytes
#: outweigh the noise is 28 (ZeRO-2 on ``small``, 2 ranks). Where the parameters are few
#: (``tiny``: 60 KB a rank) a run's noise over them reads as thousands of passes: one
#: calibration gave tp 1878 passes, 41 ms a micro-batch, and the layouts that paid it
#: came out 24 and 56 % slow.
MAX_PASSES = 32


def with_parameter_costs(pm, workload: Workload, profile, runs: Runs, progress):
    """The profile with each ``PER_BYTE`` mechanism's cost per parameter byte measured.

    The fixed cost, measured at a negligible width, misses what grows with the
    parameters beyond the collectives' curves: FSDP's and ZeRO's copies into
    and out of their gather and reduce buffers and gathers that take cores
    from compute, DTensor's handling of tensor-parallel parameters. The
    full-width workload on the mechanism's calibration layout at one sequence
    per rank: its measured step less everything the model predicts for it
    (the per-byte costs measured before it included), per micro-batch, over
    the rank's fp32 parameter bytes (never below 0, nor above ``MAX_PASSES``).
    """
    for mechanism in PER_BYTE:
        for index, entry in enumerate(profile.overhead):
            if entry.mechanism != mechanism:
                continue
            ranks = entry.ranks_per_node
            progress(f"{mechanism} per parameter byte at {ranks} rank(s) per node")
            found = _full_width(pm, workload, mechanism, ranks, profile, runs)
            if found is None:
                continue
            per_byte, passes = _per_byte(found, profile.compute_for(ranks))
            how = entry.how + _full_how(mechanism, runs.repeats) + passes
            entries = list(profile.overhead)
            entries[index] = attrs.evolve(entry, per_parameter_byte_s=per_byte, how=how)
            profile = attrs.evolve(profile, overhead=tuple(entries))
    return profile


def _per_byte(found: FullWidth, compute) -> tuple[float, str]:
    """(seconds per parameter byte a micro-batch, the measurement in passes over the bytes):
    the run's residual per micro-batch paid over 4 x its parameters, never below 0 nor above
    ``MAX_PASSES`` passes at the element-wise rate."""
    paid = micro_batches_paid(found.shape, compute)
    residual_s = (found.measured_ms - found.predicted.step_time_ms) / 1e3 / paid
    rate = compute.elementwise_bytes_per_s
    passes = residual_s / (4 * found.parameters) * rate
    bounded = f", bounded at {MAX_PASSES}" if passes > MAX_PASSES else ""
    return min(max(0.0, passes), MAX_PASSES) / rate, (
        f" ({passes:.1f} passes over them at the element-wise rate{bounded})"
    )


def _full_how(mechanism: str, repeats: int) -> str:
    return (
        "; per parameter byte: mtb run of the full-width workload on "
        f"{_layout_words(mechanism)} at one sequence per rank, its median step "
        f"({_fastest(repeats)}) less the step model's prediction, per micro-batch, over the "
        "rank's fp32 parameter bytes"
    )
