"""Process-group set-up and tear-down for one worker, and small gather helpers."""

import datetime as dt
import os

import attrs
import torch
import torch.distributed as dist

from mtb.context import RunContext
from mtb.errors import RunFailed, UsageError, one_line


def launched_by_torchrun() -> bool:
    """True inside a worker that torchrun or our launcher started."""
    return "TORCHELASTIC_RUN_ID" in os.environ or {"RANK", "WORLD_SIZE"} <= os.environ.keys()


def resolve_device_type(requested: str) -> str:
    cuda = torch.cuda.is_available()
    if requested == "auto":
        return "cuda" if cuda else "cpu"
    if requested == "cuda" and not cuda:
        raise UsageError("launch.device: 'cuda' requested but no CUDA device is available")
    return requested


def resolve_backend(requested: str, device_type: str) -> str:
    if requested == "auto":
        return "nccl" if device_type == "cuda" else "gloo"
    if requested == "nccl" and device_type != "cuda":
        raise UsageError("launch.backend: 'nccl' needs launch.device cuda; use gloo on cpu")
    return requested


#: CPU workers per core above which a run is refused: each worker is a whole
#: Python + torch process, and that many mostly measure the scheduler
MAX_CPU_WORKERS_PER_CORE = 4


def cpu_oversubscription(nproc_per_node: int, cores: int | None = None) -> str | None:
    """A warning when CPU workers outnumber cores; a UsageError far past that."""
    cores = cores or os.cpu_count() or 1
    if nproc_per_node > MAX_CPU_WORKERS_PER_CORE * cores:
        raise UsageError(
            f"launch.nproc_per_node: {nproc_per_node} CPU workers on {cores} core(s); "
            f"allowed: at most {MAX_CPU_WORKERS_PER_CORE * cores} "
            f"({MAX_CPU_WORKERS_PER_CORE} per core)"
        )
    if nproc_per_node > cores:
        return (
            f"{nproc_per_node} CPU workers share {cores} core(s): "
            "timings measure oversubscription, not the strategy"
        )
    return None


def _effective_launch(config):
    """Record the world torchrun actually gave us in the stored config."""
    world = int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    launch = attrs.evolve(
        config.launch,
        nproc_per_node=local,
        nnodes=max(1, world // local),
        node_rank=int(os.environ.get("GROUP_RANK", 0)),
    )
    return attrs.evolve(config, launch=launch)


def setup(config) -> RunContext:
    """Choose the device and, inside a launched worker, join the process group."""
    device_type = resolve_device_type(config.launch.device)
    if not launched_by_torchrun():
        return RunContext(config, device=torch.device(device_type))
    config = _effective_launch(config)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(device_type, local_rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = resolve_backend(config.launch.backend, device_type)
    dist.init_process_group(
        backend,
        timeout=dt.timedelta(seconds=config.launch.timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    return RunContext(
        config,
        rank=rank,
        local_rank=local_rank,
        world_size=dist.get_world_size(),
        device=device,
        backend=backend,
    )


def teardown(context: RunContext) -> None:
    """Barrier, then destroy the group: exiting right after collectives can abort gloo."""
    if context.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def gather(context: RunContext, value) -> list:
    """Every rank's ``value``, ordered by rank (a one-element list without a group)."""
    if not context.distributed:
        return [value]
    gathered = [None] * context.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def barrier(context: RunContext) -> None:
    if context.distributed:
        dist.barrier()


def rank_rows(context: RunContext, row: torch.Tensor) -> torch.Tensor:
    """Every rank's 1-D ``row``, stacked in rank order on every rank: one all_reduce.

    Each rank fills only its own row of a zero table, so the sum is exact
    (x + 0 == x, NaN and inf included).
    """
    table = torch.zeros(context.world_size, row.numel(), device=row.device, dtype=row.dtype)
    table[context.rank] = row
    if context.distributed:
        dist.all_reduce(table)
    return table


def any_rank(context: RunContext, flag: bool) -> bool:
    """True on every rank when ``flag`` is true on any: one one-element all_reduce."""
    if not context.distributed:
        return flag
    box = torch.tensor([float(flag)], device=context.device)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)
    return bool(box.item())


def broadcast(context: RunContext, value=None):
    """Rank 0's ``value`` on every rank (``value`` itself without a group)."""
    if not context.distributed:
        return value
    box = [value if context.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def agree(context: RunContext, produce):
    """Rank 0 runs ``produce()``; every rank gets its result or raises its error.

    The error is re-raised on every rank with the same message, so no rank
    waits in a collective for a rank that already failed.
    """
    outcome = None
    if context.is_main:
        try:
            outcome = ("ok", produce())
        except UsageError as error:  # carried to every rank below, as text
            outcome = ("usage", str(error))
        except Exception as error:
            outcome = ("failed", one_line(error))
    status, value = broadcast(context, outcome)
    if status == "usage":
        raise UsageError(value)
    if status == "failed":
        raise RunFailed(value)
    return value
