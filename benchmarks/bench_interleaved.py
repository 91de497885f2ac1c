"""Observer for the interleaved harness benchmark: a bare step after every mtb step.

Loaded into mtb's workers with MTB_PLUGIN_MODULES=bench_interleaved. At the
start of a trial it builds a second model in the same ranks, wrapped as the
bare loop wraps it (``bare_distributed.wrap``), with its own AdamW and data;
after each mtb step it runs one bare step (``bare_distributed.bare_step``)
and stamps its start and end. Both sides then share the processes, the cores
and the moment: the slow drift of a shared machine, which moves whole runs by
10 % and more, falls on both alike. Rank 0 writes the stamps to
MTB_BENCH_STAMPS when the run ends.
"""

import json
import os
import time
from pathlib import Path

import torch
from bare_distributed import bare_step, wrap
from harness import bare_optimizer_and_data

from mtb.api import GPT, hookimpl

#: (start, end) of each bare step, in perf_counter seconds
STAMPS: list[tuple[float, float]] = []
BARE: dict = {}


@hookimpl
def mtb_trial_start(context):
    config = context.config
    with torch.random.fork_rng(devices=[]):  # mtb's own random state stays as it was
        torch.manual_seed(config.data.seed)
        model = wrap(GPT(config.model).to(context.device), config.strategy)
    optimizer, data = bare_optimizer_and_data(
        config, model, dp_rank=context.rank, dp_world_size=context.world_size
    )
    BARE.update(model=model, optimizer=optimizer, data=data, step=0)


@hookimpl
def mtb_step_end(context, metrics):
    start = time.perf_counter()
    loss = bare_step(BARE["model"], BARE["optimizer"], BARE["data"], BARE["step"])
    # the ranks leave mtb's step together (its last act is an all_reduce); a bare step ends
    # with no collective, and its ranks' skew would fall on mtb's next step: the bare
    # step waits for it itself, as the bare loop's next step would
    torch.distributed.barrier()
    BARE["step"] += 1
    STAMPS.append((start, time.perf_counter()))
    if BARE["step"] == context.config.training.steps:  # the mean over ranks, as mtb's
        mean = loss.detach().clone()
        torch.distributed.all_reduce(mean)
        BARE["final_loss"] = float(mean.item()) / context.world_size


@hookimpl
def mtb_run_end(context, result):
    path = os.environ.get("MTB_BENCH_STAMPS")
    if path and context.rank == 0:
        Path(path).write_text(json.dumps({"stamps": STAMPS, "final_loss": BARE["final_loss"]}))
