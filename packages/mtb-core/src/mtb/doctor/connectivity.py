"""Can the nodes meet and talk: the rendezvous, an all_reduce, and its bandwidth.

Every rank of every node joins one process group through core's launcher
(the same rendezvous ``mtb run`` takes, so an unreachable endpoint fails the
same way, naming it), checks that a small all_reduce adds up, and times a
larger one as nccl-tests would (busbw = algbw x 2(n-1)/n).
"""

import socket
import time

import attrs

from mtb.config import LaunchConfig
from mtb.doctor.check import FAIL, OK, SKIPPED, WARN, Check

AREA = "connectivity"
MiB = 2**20


@attrs.define(kw_only=True)
class ProbeSpec:
    """What each launched rank measures; ``launch`` is core's [launch] section."""

    launch: LaunchConfig
    probe_bytes: int = 16 * MiB
    iterations: int = 5


def _timed_all_reduce(tensor, iterations: int, sync) -> float:
    """Seconds per all_reduce, mean over ``iterations`` after one warm-up call."""
    import torch.distributed as dist

    dist.all_reduce(tensor)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    sync()
    return (time.perf_counter() - start) / iterations


def measure(context, spec: ProbeSpec) -> dict:
    """One rank: does a one-element all_reduce add up, and how long do both sizes take."""
    import torch

    sync = torch.cuda.synchronize if context.device.type == "cuda" else (lambda: None)
    ones = torch.ones(1, device=context.device)
    small_s = _timed_all_reduce(ones.clone(), spec.iterations, sync)
    check = torch.ones(1, device=context.device)
    torch.distributed.all_reduce(check)
    big = torch.ones(spec.probe_bytes // 4, device=context.device)
    big_s = _timed_all_reduce(big, spec.iterations, sync)
    return {
        "rank": context.rank,
        "hostname": socket.gethostname(),
        "sum_ok": int(check.item()) == context.world_size,
        "small_us": small_s * 1e6,
        "probe_s": big_s,
    }


def rank_side(spec: ProbeSpec) -> dict | None:
    """A launched rank: join, measure, gather to rank 0, leave."""
    from mtb import distributed
    from mtb.launch import node_provenance

    context = distributed.setup(spec)
    if not context.distributed:
        raise RuntimeError("the connectivity probe needs a process group")
    values = distributed.gather(context, measure(context, spec))
    nodes = node_provenance(context)
    environment = {"world_size": context.world_size, "backend": context.backend}
    distributed.teardown(context)
    return {**environment, "ranks": values, "nodes": nodes} if context.is_main else None


def summarize(gathered: dict, probe_bytes: int, elapsed_s: float) -> Check:
    ranks = gathered["ranks"]
    world = gathered["world_size"]
    slowest = max(r["probe_s"] for r in ranks)
    busbw = probe_bytes / slowest * 2 * (world - 1) / world / 1e9
    wrong = [r["rank"] for r in ranks if not r["sum_ok"]]
    details = {
        **gathered,
        "probe_bytes": probe_bytes,
        "probe_time_s": slowest,
        "busbw_gbps": busbw,
        "small_latency_us": max(r["small_us"] for r in ranks),
        "hosts": sorted({r["hostname"] for r in ranks}),
        "elapsed_s": elapsed_s,
    }
    message = (
        f"{world} ranks over {gathered['backend']}: all_reduce of {probe_bytes / MiB:g} MiB in "
        f"{slowest * 1e3:.2f} ms (busbw {busbw:.2f} GB/s), 4 B in "
        f"{details['small_latency_us']:.0f} us; rendezvous and probe took {elapsed_s:.1f} s"
    )
    status = OK
    if wrong:
        status, message = FAIL, f"all_reduce gave a wrong sum on rank(s) {wrong}"
    elif world == 1:
        status = WARN
        message = (
            f"1 rank over {gathered['backend']}: the store and the process group work, "
            "but there is no link to measure; use --nproc-per-node 2 or several nodes"
        )
    return Check(name="all_reduce", area=AREA, status=status, message=message, details=details)


def _cause(error: BaseException) -> str:
    """One line for a failed launch, from the innermost error (torch wraps the socket's)."""
    from mtb.errors import one_line
    from mtb.launch import LaunchTimeout

    if isinstance(error, LaunchTimeout):
        return f"nothing answered in time ({error})"
    while error.__cause__ is not None:
        error = error.__cause__
    return one_line(error)


def checks(launch: LaunchConfig, probe_bytes: int, skip: bool) -> list[Check]:
    from mtb import launch as launch_layer

    if skip:
        return [Check(name="all_reduce", area=AREA, status=SKIPPED, message="--skip-connectivity")]
    started = time.perf_counter()
    spec = ProbeSpec(launch=launch, probe_bytes=probe_bytes)
    try:
        gathered = launch_layer.run_function(launch, rank_side, spec)
    except Exception as error:  # the rendezvous failing in any way is this check's answer
        where = f" at {launch.rdzv_endpoint}" if launch.rdzv_endpoint else ""
        message = f"no process group of {launch.world_size} ranks{where}: {_cause(error)}"
        return [Check(name="rendezvous", area=AREA, status=FAIL, message=message)]
    elapsed = time.perf_counter() - started
    if gathered is None:  # global rank 0 lives on another node and keeps the figures
        message = f"joined {launch.world_size} ranks at {launch.rdzv_endpoint} in {elapsed:.1f} s"
        message += "; node 0's doctor reports the bandwidth"
        return [Check(name="all_reduce", area=AREA, status=OK, message=message)]
    return [summarize(gathered, probe_bytes, elapsed)]
