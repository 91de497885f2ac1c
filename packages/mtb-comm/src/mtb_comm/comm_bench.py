"""``mtb comm`` on one rank: every operation, size and placement, timed and checked.

For each case the rank warms up, meets the others at a barrier, times
``iters`` calls one by one, then checks one more call on fresh inputs and
counts the wrong elements. The timed calls reuse their buffers (in-place
reductions let values grow; that costs the same), the check never shares
them. Rank 0 reduces the per-rank records (results.reduce_comm).
"""

from mtb_comm import collectives
from mtb_comm import config as cfg
from mtb_comm.bandwidth import element_count
from mtb_comm.moe_routing import uneven_splits
from mtb_comm.timing import time_iterations, warm_up

UNSUPPORTED_MARKERS = ("not supported", "unsupported", "not implemented")


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def cases(config):
    """(operation, placement, mode) in the order they run; mode only for all_to_all."""
    modes = ("equal", "uneven") if config.all_to_all_mode == "both" else (config.all_to_all_mode,)
    for operation in config.operations:
        for placement in collectives.PLACEMENTS[operation]:
            for mode in modes if operation == "all_to_all" else (None,):
                yield operation, placement, mode


def splits_for(mode: str | None, count: int, world: int, seed: int):
    if mode == "uneven":
        return uneven_splits(count, world, seed)
    return collectives.equal_splits(count, world)


def _unsupported(error: Exception) -> bool:
    return any(marker in str(error).lower() for marker in UNSUPPORTED_MARKERS)


def measure_case(context, config, operation, placement, mode, size_bytes) -> dict:
    """One rank's raw record of one case over its group (``collectives.Members``): times,
    wrong elements, or why it was skipped."""
    import torch.distributed as dist

    dtype = torch_dtype(config.dtype)
    count = element_count(operation, size_bytes, dtype.itemsize, context.world_size)
    splits = splits_for(mode, count, context.world_size, config.seed)
    record = {
        "operation": operation,
        "placement": placement,
        "mode": mode,
        "elements": count,
        "splits": splits if operation == "all_to_all" else None,
    }
    try:
        call = collectives.prepare(context, operation, count, dtype, placement, splits)
        warm_up(call.run, max(1, config.warmup), context.device)
    except (RuntimeError, NotImplementedError) as error:
        if not _unsupported(error):
            raise
        return {**record, "skipped": str(error).splitlines()[0]}
    dist.barrier()
    times = time_iterations(call.run, config.iters, context.device)
    del call
    check = collectives.prepare(context, operation, count, dtype, placement, splits)
    check.run()
    return {
        **record,
        "skipped": None,
        "times_us": times,
        "wrong_elements": collectives.wrong_elements(check),
        "checked_elements": check.output.numel(),
    }


def measure(context, config) -> list[dict]:
    """Every case at every size, in a fixed order that every rank shares; with
    ``group_size`` every group runs each case at once (a barrier over all ranks first)."""
    group = collectives.members(context, cfg.group_of(config, context.world_size))
    return [
        {"size_bytes": size, **measure_case(group, config, *case, size)}
        for case in cases(config)
        for size in config.sizes_bytes
    ]
