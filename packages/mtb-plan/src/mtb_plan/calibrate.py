"""Measure a device profile on the machine at hand.

For each ranks-per-node count N the operators are timed on N ranks at once
(the ranks of ``mtb run --nproc-per-node N``, with the threads it gives
them), because ranks that share a node slow each other down; the collective
curves come from ``mtb comm`` run at N ranks and fitted (curves.py), or from
``mtb comm`` documents of other runs (a multi-node one gives the ``cluster``
scope). Memory capacity is the device's on a GPU; on a CPU it is the node's
(its ranks share it: ``Profile.memory_per_rank`` divides it).
"""

import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from mtb.api import LaunchConfig, UsageError, run_function, utc_now
from mtb_plan import curves, operators, overheads
from mtb_plan.profile import Compute, Profile
from mtb_plan.workload import Workload

GEMM_NAMES = "qkv, attention_out, mlp_up, mlp_down, head"


def parameter_count(preset: str) -> int:
    """Parameters of the preset's model, built on the meta device (no memory)."""
    import torch

    from mtb.api import GPT, resolve_config

    with torch.device("meta"):
        model = GPT(resolve_config(flags={"preset": preset}).model)
    return sum(p.numel() for p in model.parameters())


def compute_spec(workload: Workload, micro_batches, launch, threads, repeats=5):
    """The shapes each rank times: every micro-batch's GEMMs, activations and attention."""
    heads, head_dim = workload.n_heads, workload.d_model // workload.n_heads
    return operators.ComputeSpec(
        launch=launch,
        gemms=tuple(g for b in micro_batches for g in workload.gemm_shapes(b, 1)),
        activations=tuple(
            (b * workload.seq_len, workload.d_model, workload.hidden) for b in micro_batches
        ),
        attention=tuple(
            (b, heads, workload.seq_len, head_dim, workload.attention_flops(b))
            for b in micro_batches
        ),
        parameters=parameter_count(workload.preset),
        precision=workload.precision,
        threads=threads,
        repeats=repeats,
    )


def threads_per_rank(device: str, nproc: int) -> int | None:
    """What ``mtb run`` gives each rank: OMP_NUM_THREADS if set, else cores / ranks (CPU)."""
    if device == "cuda":
        return None
    given = os.environ.get("OMP_NUM_THREADS", "")
    return (
        int(given) if given.isdigit() and int(given) > 0 else max(1, (os.cpu_count() or 1) // nproc)
    )


def compute_how(spec, workload, micro_batches, nproc: int) -> str:
    threads = f", {spec.threads} thread(s) each" if spec.threads else ""
    count = min(spec.parameters, operators.OPTIMIZER_MAX_PARAMS)
    return (
        f"{nproc} rank(s) timing at once{threads}, {operators.DTYPES[workload.precision]}, the "
        f"slowest rank's figures; each time the median of {spec.repeats} samples (a sample "
        f"repeats the call for at least {operators.MIN_SAMPLE_S * 1e3:.0f} ms). matmul: "
        f"F.linear forward, dY·W and dYᵀ·X backward at the {workload.preset} GEMM shapes "
        f"({GEMM_NAMES}) for micro-batches {','.join(map(str, micro_batches))}, FLOP-weighted; "
        "attention: causal scaled_dot_product_attention forward and backward (2x the forward "
        "FLOPs); element-wise: layer_norm and add on the hidden states, gelu on the MLP width "
        "(bytes read + written); overhead: a one-element add; optimizer: AdamW.step on "
        f"{count} fp32 parameters, {operators.OPTIMIZER_BYTES_PER_PARAM} B per parameter; "
        "solo speed-up: rank 0's GEMMs again while the other ranks wait"
    )


def measure_compute(workload, micro_batches, nproc, device, timeout_s) -> Compute:
    """The compute figures of ``nproc`` ranks per node."""
    threads = threads_per_rank(device, nproc)
    launch = LaunchConfig(nproc_per_node=nproc, device=device, timeout_s=timeout_s)
    spec = compute_spec(workload, micro_batches, launch, threads)
    before = os.environ.get("OMP_NUM_THREADS")
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        figures = run_function(launch, operators.rank_main, spec)
    finally:
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = before
    how = compute_how(spec, workload, micro_batches, nproc)
    return Compute(ranks_per_node=nproc, threads_per_rank=threads, **figures, how=how)


def memory_capacity(device: str) -> tuple[int, str, str]:
    """(bytes, scope, how): the GPU's memory, or the node's (MemTotal or a cgroup limit)."""
    if device == "cuda":
        import torch

        total = torch.cuda.get_device_properties(0).total_memory
        return total, "device", "torch.cuda.get_device_properties(0).total_memory"
    total = _meminfo_total()
    limit = _cgroup_limit()
    if limit and limit < total:
        return limit, "node", "the cgroup memory limit (below MemTotal), shared by the node's ranks"
    return total, "node", "MemTotal of /proc/meminfo, shared by the node's ranks"


def _meminfo_total() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


def device_name(device: str) -> str:
    if device == "cuda":
        import torch

        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def comm_runs(ranks_per_node) -> list[tuple[int, int]]:
    """(ranks, group size) of each ``mtb comm`` run: for every N ranks per node, every group
    a layout of N forms within a node (each divisor >= 2 of N), all N / size groups at once,
    as the layout runs them (on a CPU N ranks share its cores: 4 ranks' groups of 2 wait
    longer than 2 ranks alone)."""
    return [
        (nproc, size)
        for nproc in sorted(set(ranks_per_node))
        for size in range(2, nproc + 1)
        if nproc % size == 0
    ]


def comm_curves(ranks_per_node, precision, device, sizes, timeout_s, comm_prefix, progress):
    """Curves of every group size a node's layouts use, from ``mtb comm`` runs of them."""
    found = []
    for nproc, group in comm_runs(ranks_per_node):
        groups = "" if group == nproc else f" in groups of {group}"
        progress(f"mtb comm at {nproc} ranks per node{groups} (sizes {sizes})")
        output = f"{comm_prefix}-comm-{nproc}{'' if group == nproc else f'-groups-of-{group}'}.json"
        document = curves.run_comm(nproc, sizes, precision, device, timeout_s, output, group)
        source = f"--nproc-per-node {nproc} --group-size {group} ({Path(output).name})"
        found += curves.curves_of(document, source)
    return found


def documents_curves(paths, precision: str) -> list:
    """Curves from existing ``mtb comm`` documents (a multi-node run gives scope cluster)."""
    found = []
    for path in paths:
        document = curves.read_document(path)
        dtype = document.get("config", {}).get("dtype")
        if dtype != curves.COMM_DTYPES[precision]:
            raise UsageError(
                f"--from-comm: {path} was measured in {dtype}, the profile is {precision} "
                f"(run mtb comm with --dtype {curves.COMM_DTYPES[precision]})"
            )
        found += curves.curves_of(document, Path(path).name)
    return found


def merged(*groups) -> tuple:
    """Curves keyed by (collective, group size, scope, ranks running); a later group
    replaces an earlier."""
    table = {}
    for group in groups:
        for curve in group:
            key = (curve.collective, curve.group_size, curve.scope, curve.ranks_per_node or 0)
            table[key] = curve
    return tuple(
        table[key] for key in sorted(table, key=lambda k: (k[2] != "node", k[1], k[3], k[0]))
    )


def calibrate(
    preset: str = "small",
    micro_batches: Sequence[int] = (1, 2, 4),
    precision: str = "fp32",
    ranks_per_node: Sequence[int] = (1, 2),
    device: str = "auto",
    from_comm: Sequence[str | Path] = (),
    comm_sizes: str = "4K,64K,1M,8M",
    timeout_s: float = 600.0,
    comm_prefix: str | Path = "plan-profile",
    progress: Callable[[str], None] = lambda line: None,
    measure_overheads: bool = True,
    repeats: int = overheads.REPEATS,
) -> Profile:
    """Measure every figure the step model needs for ``preset`` on this machine.

    ``comm_prefix``: the ``mtb comm`` documents are kept as PREFIX-comm-N.json (and
    PREFIX-comm-N-groups-of-G.json),
    evidence beside the profile. ``repeats``: runs of each fixed-cost and full-width
    measurement, the fastest kept.
    """
    from mtb.api import distributed

    device = distributed.resolve_device_type(device)
    workload = Workload.of(preset, max(micro_batches), precision, "adamw")
    computes = []
    for nproc in ranks_per_node:
        progress(f"operators at {nproc} rank(s) per node ({preset}, {precision}, {device})")
        started = time.perf_counter()
        computes.append(measure_compute(workload, micro_batches, nproc, device, timeout_s))
        progress(f"operators at {nproc} rank(s) per node: {time.perf_counter() - started:.1f} s")
    measured = comm_curves(
        ranks_per_node, precision, device, comm_sizes, timeout_s, comm_prefix, progress
    )
    memory, scope, memory_how = memory_capacity(device)
    from mtb.api import get_plugin_manager

    pm = get_plugin_manager()
    runtimes = runtime_figures(pm, device, memory, timeout_s, progress)
    profile = Profile(
        name=f"{socket.gethostname()}-{device}",
        device=device,
        device_name=device_name(device),
        precision=precision,
        devices_per_node=_devices_per_node(device, ranks_per_node),
        memory_bytes=memory,
        memory_scope=scope,
        **runtimes,
        how=f"mtb plan calibrate --preset {preset}; memory: {memory_how}; runtime_bytes: "
        f"{RUNTIME_HOW}{ZERO_RUNTIME_HOW if 'zero_runtime_bytes' in runtimes else ''}",
        created=utc_now(),
        compute=tuple(computes),
        comm=merged(measured, documents_curves(from_comm, precision)),
    )
    if not measure_overheads:
        return profile
    runs = overheads.Runs(timeout_s=timeout_s, repeats=repeats)
    found = [
        entry
        for nproc in ranks_per_node
        for entry in overheads.measure(pm, workload, nproc, profile, runs, progress)
    ]
    profile = attrs.evolve(profile, overhead=tuple(found))
    efficient = []
    for entry in profile.compute:
        efficiency, how = overheads.training_efficiency(
            pm, workload, entry.ranks_per_node, profile, runs, progress, micro_batches
        )
        efficient.append(attrs.evolve(entry, training_efficiency=efficiency, how=entry.how + how))
    profile = attrs.evolve(profile, compute=tuple(efficient))
    return overheads.with_parameter_costs(pm, workload, profile, runs, progress)


RUNTIME_HOW = (
    "the peak memory of `mtb run --strategy single --preset tiny` (a model of 30 thousand "
    "parameters): the interpreter, torch, mtb and its process group, measured as a "
    "verification measures a run (peak resident set on CPU, with the run's memory cap, which "
    "maps large tensors on their own; the CUDA allocator's peak on a GPU)"
)
ZERO_RUNTIME_HOW = (
    "; zero_runtime_bytes: the same of `--strategy zero2` on one rank, DeepSpeed's import and "
    "engine included"
)
#: profile field -> the strategy whose tiny run on one rank measures it
RUNTIME_STRATEGIES = {"runtime_bytes": "single", "zero_runtime_bytes": "zero2"}


def runtime_figures(pm, device: str, capacity: int, timeout_s: float, progress) -> dict:
    """Each runtime figure whose strategy is installed (zero2 needs DeepSpeed)."""
    installed = {e.name for e in pm.registry("strategy") if not e.unavailable_reason}
    figures = {}
    for field, strategy in RUNTIME_STRATEGIES.items():
        if strategy in installed:
            progress(f"runtime memory: mtb run --strategy {strategy} --preset tiny")
            figures[field] = runtime_bytes(device, capacity, timeout_s, strategy)
    return figures


def runtime_bytes(device: str, capacity: int, timeout_s: float, strategy: str = "single") -> int:
    """What a training process holds besides its model: a tiny model's run on one rank."""
    import json
    import subprocess
    import sys
    import tempfile

    from mtb_plan.verify import peak_memory

    with tempfile.TemporaryDirectory(prefix="mtb-plan-runtime-") as folder:
        output = Path(folder) / "tiny.json"
        command = [sys.executable, "-m", "mtb", "run", "--strategy", strategy, "--preset", "tiny"]
        command += ["--steps", "3", "--warmup-steps", "1", "--peak-tflops", "1"]
        command += ["--device", device, "--output", str(output)]
        if device == "cpu":
            command += ["--memory-limit-per-rank", str(capacity)]
        finished = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if finished.returncode != 0:
            last = (finished.stderr.strip().splitlines() or ["no output"])[-1]
            raise UsageError(f"calibrate: the runtime's tiny {strategy} run failed: {last}")
        return int(peak_memory(json.loads(output.read_text())["summary"]))


def _devices_per_node(device: str, ranks_per_node) -> int:
    """GPUs on the node; on a CPU the most ranks per node measured (the ranks are its devices)."""
    if device == "cuda":
        import torch

        return torch.cuda.device_count()
    return max(ranks_per_node)
