"""The pipeline engine: a step's micro-batches through a torch.distributed.pipelining schedule.

The engine owns the whole step (``forward_backward``): the step's sequences
are split into the schedule's micro-batches, the last stage computes the
loss, and gradients are averaged over micro-batches by the schedule, so the
step's gradient is the one of the whole batch. Afterwards one all_reduce over
the pipeline's ranks carries the last stage's loss to every stage and sums
the stages' squared gradient norms. Tied embeddings live on the first and the
last stage; their gradients are summed across the two (as Megatron-LM does),
so both copies take the same step.
"""

import attrs
import torch
import torch.distributed as dist

from mtb.api import Engine, SyncCounter, cpu_copy, pipeline_microbatches
from mtb_strategies import pipeline_schedule
from mtb_strategies.pipeline_stages import split

#: get/set_state_dict options: each rank's optimizer state under its own parameters' names
#: (stages hold different parameters, so unflattened param_groups would clash in DCP)
FLAT_OPTIMIZER = {"flatten_optimizer_state_dict": True}


@attrs.define
class Pipeline:
    """This rank's side of the pipeline: its stages, their schedule and groups."""

    indices: list[int]
    stages: int
    schedule: object
    parts: list
    clock: object
    group: object
    #: micro-batch backwards during which gradients were synchronised (FSDP's reduce-scatter)
    counter: SyncCounter
    #: the group of the first and last stage's ranks (tied embeddings), or None
    tied: object = None


def tied_group(layout, rank: int, pipeline_group):
    """The group of the first and last stage's ranks beside this rank (every rank calls it);
    None on the ranks between, which hold neither copy.

    With 2 pipeline ranks it is the pipeline's own group (made with the mesh).
    """
    if layout.pp == 2:
        return pipeline_group
    inner = layout.world_size // layout.pp
    groups = [dist.new_group([index, (layout.pp - 1) * inner + index]) for index in range(inner)]
    ends = layout.coordinates(rank)["pp"] in (0, layout.pp - 1)
    return groups[rank % inner] if ends else None


def stage_indices(layout, rank: int, per_rank: int) -> list[int]:
    """The stages of ``rank``: its pipeline rank, then every ``pp`` stages after (looped)."""
    first = layout.coordinates(rank)["pp"]
    return [first + k * layout.pp for k in range(per_rank)]


def stage_squared_norm(grads: list) -> torch.Tensor:
    """The squared 2-norm of one stage's gradients, whole across the meshes they live on.

    DTensor norms reduce on their own mesh (one group per mesh: tensor- and
    data-parallel meshes may mix); plain gradients are whole on every rank.
    """
    groups: dict = {}
    for grad in grads:
        groups.setdefault(getattr(grad, "device_mesh", None), []).append(grad)
    squares = []
    for mesh, group in groups.items():
        norm = torch.nn.utils.get_total_norm(group)
        squares.append((norm if mesh is None else norm.full_tensor()).float().square())
    return torch.stack(squares).sum()


def local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


class PipelineEngine(Engine):
    """Runs each step as one pipeline schedule; the trainer sees one loss and one norm."""

    state_dict_options = FLAT_OPTIMIZER

    def __init__(self, model, optimizer, context, pipeline: Pipeline):
        super().__init__(model, optimizer, context)
        self.pipeline = pipeline
        self.norm = None
        self.timings: list[dict] = []

    @classmethod
    def build(cls, model, make_optimizer, context, group, parallelize=None):
        """Split ``model`` into this rank's stages over the pipeline ``group``.

        ``parallelize(part, counter)`` (optional) shards each stage module further (tp,
        FSDP counting its gradient syncs on ``counter``).
        """
        config, layout = context.config, context.layout
        per_rank = config.parallel.pp_stages_per_rank
        stages = layout.pp * per_rank
        indices = stage_indices(layout, context.rank, per_rank)
        tied = tied_group(layout, context.rank, group) if config.model.tie_embeddings else None
        parts = split(model, indices, stages)
        counter = SyncCounter()
        for part in parts if parallelize else ():
            parallelize(part, counter)
        microbatches = pipeline_microbatches(config)
        schedule, clock = pipeline_schedule.build(
            (parts, counter), indices, stages, config.parallel, microbatches, context.device, group
        )
        pipeline = Pipeline(indices, stages, schedule, parts, clock, group, counter, tied)
        return cls(model, make_optimizer(model.parameters()), context, pipeline)

    @property
    def first(self) -> bool:
        return 0 in self.pipeline.indices

    @property
    def last(self) -> bool:
        return self.pipeline.stages - 1 in self.pipeline.indices

    def forward_backward(self, batches, hooks):
        pipeline = self.pipeline
        for part in pipeline.parts:
            part.on_output = hooks.on_loss
        inputs = torch.cat([batch.inputs for batch in batches]) if self.first else None
        targets = torch.cat([batch.targets for batch in batches]) if self.last else None
        losses: list[torch.Tensor] = []
        pipeline.clock.start()
        args = () if inputs is None else (inputs,)
        with hooks.range("mtb.forward_backward"), self.autocast():
            pipeline.schedule.step(*args, target=targets, losses=losses)
        pipeline.clock.mark("idle")
        self.timings.append(pipeline.clock.phases_ms())
        self.sum_tied_gradients()
        self.prepare_gradients()
        return self.agree(losses)

    def prepare_gradients(self) -> None:
        """Place each gradient as its parameter before the norm is taken (tp's, see nd)."""

    def tied_parameter(self):
        """This rank's copy of the tied embedding: the first stage's, or the last's head."""
        if self.pipeline.tied is None:
            return None
        return self.model.tok_emb.weight if self.first else self.model.head.weight

    def sum_tied_gradients(self) -> None:
        """Sum the tied weight's gradient over its two stages, whole.

        The two copies may be split differently (tensor parallelism shards the
        head by vocabulary rows and leaves the embedding's gradient whole), so
        the sum is taken on the whole gradient and each copy keeps its own part.
        """
        tied = self.tied_parameter()
        if tied is None or tied.grad is None:
            return
        grad = tied.grad
        full = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
        dist.all_reduce(full, group=self.pipeline.tied)
        if full is not grad:
            from torch.distributed.tensor import distribute_tensor

            mine = distribute_tensor(full, grad.device_mesh, grad.placements)
            local(grad).copy_(mine.to_local())

    def agree(self, losses: list) -> torch.Tensor:
        """The last stage's mean loss and the model's gradient norm, on every stage."""
        zero = torch.zeros((), device=self.context.device)
        loss = torch.stack(losses).mean().detach().float() if losses else zero
        counted = self.tied_parameter() if self.last else None  # the tied weight counts once
        grads = [p.grad for p in self.model.parameters() if p.grad is not None and p is not counted]
        squared = stage_squared_norm(grads) if grads else zero
        both = torch.stack([loss, squared])
        dist.all_reduce(both, group=self.pipeline.group)
        self.norm = both[1].sqrt()
        return both[0]

    def grad_norm(self):
        return self.norm

    def optimizer_step(self, max_grad_norm=None, grad_norm=None):
        info = super().optimizer_step(max_grad_norm, grad_norm)
        info.gradient_syncs = self.pipeline.counter.take()
        return info

    def full_model_state(self) -> dict:
        """Every stage's parameters under the GPT's names, gathered on every rank."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True)
        mine = cpu_copy(get_model_state_dict(self.model, options=options))
        parts: list = [None] * dist.get_world_size(self.pipeline.group)
        dist.all_gather_object(parts, mine, group=self.pipeline.group)
        return {name: tensor for part in parts for name, tensor in part.items()}

    def details(self) -> dict:
        parallel = self.context.config.parallel
        return {
            "pipeline": {
                "schedule": parallel.pp_schedule,
                "stages": self.pipeline.stages,
                "microbatches": pipeline_microbatches(self.context.config),
                "stages_per_rank": parallel.pp_stages_per_rank,
            }
        }

    def rank_metrics(self, warmup_steps: int) -> dict:
        """This rank's stages, pipeline step time and measured bubble over the measured steps."""
        measured = self.timings[warmup_steps:]
        step_ms = [t.get("idle", 0.0) + t.get("compute", 0.0) for t in measured]
        compute_ms = [t.get("compute", 0.0) for t in measured]
        parallel, layout = self.context.config.parallel, self.context.layout
        microbatches = pipeline_microbatches(self.context.config)
        total = sum(step_ms)
        return {
            "pipeline": {
                "stages": self.pipeline.indices,
                "stage_step_ms": total / len(step_ms) if step_ms else None,
                "compute_ms": sum(compute_ms) / len(compute_ms) if compute_ms else None,
                "bubble_measured": 1.0 - sum(compute_ms) / total if total else None,
                "bubble_theoretical": pipeline_schedule.theoretical_bubble(
                    layout.pp, microbatches, parallel.pp_stages_per_rank
                ),
            }
        }
