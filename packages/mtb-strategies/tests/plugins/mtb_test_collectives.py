"""Test observer: blocking all-reduces per step, beside the strategy's gradient sync.

Wraps ``torch.distributed.all_reduce`` and the functional ``all_reduce`` (used by
DTensor reductions) at import. The gradient sync itself is not counted: DDP's
comm hook all-reduces with ``async_op=True`` and FSDP reduce-scatters. Rank 0
writes one count per step to MTB_TEST_COLLECTIVES when the run ends.
"""

import json
import os
from pathlib import Path

import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from mtb import hookimpl

CALLS = [0]
PER_STEP: list[int] = []


def _counted(function):
    def counted(*args, **kwargs):
        CALLS[0] += not kwargs.get("async_op", False)
        return function(*args, **kwargs)

    return counted


dist.all_reduce = _counted(dist.all_reduce)
funcol.all_reduce = _counted(funcol.all_reduce)


@hookimpl
def mtb_step_end(context, metrics):
    PER_STEP.append(CALLS[0])
    CALLS[0] = 0


@hookimpl
def mtb_run_end(context, result):
    path = os.environ.get("MTB_TEST_COLLECTIVES")
    if path and context.rank == 0:
        Path(path).write_text(json.dumps(PER_STEP))
