"""Test observer: saves the full model state at a chosen step (rank 0 writes).

MTB_TEST_DUMP=path.pt, MTB_TEST_DUMP_STEP=N (default: the last step of trial 0).
Every rank calls ``full_model_state`` because sharded engines gather.
"""

import os

from mtb import hookimpl


@hookimpl
def mtb_step_end(context, metrics):
    path = os.environ.get("MTB_TEST_DUMP")
    training = context.config.training
    last = training.steps - 1
    if not path or context.trial != 0:
        return
    if metrics.step != int(os.environ.get("MTB_TEST_DUMP_STEP", last)):
        return
    import torch

    state = context.engine.full_model_state()
    if context.rank == 0:
        torch.save(state, path)
