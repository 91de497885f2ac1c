"""Pipeline stages and schedules from torch.distributed.pipelining, timed.

Each stage times its own forward and backward compute (``compute`` phase);
everything else during a schedule's step (waiting for a neighbour's
activations or gradients, sends, the schedule's bookkeeping) is ``idle``.
The idle share of the step is the measured bubble, to set beside the
schedule's theoretical one.
"""

from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
)

from mtb.api import PhaseClock
from mtb_strategies.pipeline_stages import pipeline_loss

SCHEDULES = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved-1f1b": ScheduleInterleaved1F1B,
}


class TimedStage(PipelineStage):
    """A PipelineStage whose compute is marked on a PhaseClock, micro-batch known.

    Each backward, and the reduction after a step's last one, is bracketed for the
    gradient-sync counter: torch 2.13 reduce-scatters a FSDP stage's gradients once a step
    in ``perform_reduce_grad``, after every micro-batch; older releases in the last backward.
    """

    def __init__(
        self, submodule, stage_index, num_stages, device, group, clock: PhaseClock, counter
    ):
        super().__init__(submodule, stage_index, num_stages, device, group=group)
        self.clock = clock
        self.counter = counter

    def _computed(self, method, chunk: int, *args, **kwargs):
        self.clock.mark("idle")
        self.submod.micro = chunk
        try:
            return method(chunk, *args, **kwargs)
        finally:
            self.submod.micro = None
            self.clock.mark("compute")

    def forward_one_chunk(self, fwd_chunk_id, *args, **kwargs):
        return self._computed(super().forward_one_chunk, fwd_chunk_id, *args, **kwargs)

    def backward_one_chunk(self, bwd_chunk_id, *args, **kwargs):
        with self.counter.bracket():
            return self._computed(super().backward_one_chunk, bwd_chunk_id, *args, **kwargs)

    def perform_reduce_grad(self, grad_scale_factor: int):
        with self.counter.bracket():
            return super().perform_reduce_grad(grad_scale_factor)

    def backward_weight_one_chunk(self, bwd_chunk_id, *args, **kwargs):
        return self._computed(super().backward_weight_one_chunk, bwd_chunk_id, *args, **kwargs)


def build(parts, indices: list[int], stages: int, parallel, microbatches: int, device, group):
    """The schedule ``parallel.pp_schedule`` over this rank's stage modules (``parts``: the
    modules and the SyncCounter their FSDP reduce-scatters count on), and their clock."""
    modules, counter = parts
    clock = PhaseClock(device)
    timed = [
        TimedStage(part, index, stages, device, group, clock, counter)
        for part, index in zip(modules, indices, strict=True)
    ]
    schedule_class = SCHEDULES[parallel.pp_schedule]
    if parallel.pp_schedule == "interleaved-1f1b":
        schedule = schedule_class(timed, microbatches, loss_fn=pipeline_loss)
    else:
        (stage,) = timed
        schedule = schedule_class(stage, microbatches, loss_fn=pipeline_loss)
    return schedule, clock


def theoretical_bubble(pp: int, microbatches: int, stages_per_rank: int = 1) -> float:
    """Idle share of a step by the schedule's arithmetic: (p-1) / (v*m + p-1).

    GPipe and 1F1B (v = 1) idle p-1 stage-times of m+p-1; interleaving v
    stages per rank shrinks each stage-time v-fold (Narayanan et al., 2021).
    """
    return (pp - 1) / (stages_per_rank * microbatches + pp - 1)
