"""The model of one training step: memory per rank and step time, term by term.

Step time on the slowest rank (the last pipeline stage, which also runs the
head) is the sum of

- compute: each micro-batch's forward and backward (and, with activation
  checkpointing, the blocks' forward again) from the workload's GEMM FLOPs at
  the profile's achieved matmul throughput, element-wise bytes at its
  element-wise bandwidth, and a fixed cost per operator call;
- the communication the layout cannot hide: each collective's bytes at the
  profile's curve for its group size and scope (latency + bytes x bus factor /
  bus bandwidth), less the share ``comm_overlap`` of the compute it can run
  under (gradient reduction under backward; nothing that the next operator
  waits for, such as tensor-parallel all-reduces);
- the pipeline bubble: (pp - 1) micro-batch slots of a stage's forward and
  backward (GPipe and 1F1B idle alike; 1F1B holds fewer activations);
- the optimizer step over the optimizer state this rank holds;
- the fixed costs calibrate measured at a negligible width (mtb_plan.overheads):
  each mechanism's per micro-batch (a pipeline stage's share of them as its
  compute overlaps) and once a step.

Memory per rank is the runtime's own (torch, the process group), the model
states the strategy's own formula gives (``Strategy.state_bytes_estimate``,
what ``mtb estimate-memory`` prints), the activations autograd saves for the
micro-batches in flight (gradients beside them only where a forward follows a
backward in the step), and the buffers of gathered parameters and logits.
docs/planning.md gives every equation with its source.
"""

import math

import attrs

#: operator calls in one block's forward (norms, linears, attention, reshapes, adds,
#: GELU), counted with a dispatch counter on mtb's model; backward calls about twice as many
BLOCK_FORWARD_OPS = 24
HEAD_FORWARD_OPS = 14
BACKWARD_OP_FACTOR = 2.0
#: extra operator calls per block a tensor-parallel block makes (DTensor redistributions)
TP_BLOCK_FORWARD_OPS = 16
#: one all-reduce per step of the loss, the gradient norm and the finite flag (8 bytes each)
STEP_SCALARS_BYTES = 24


@attrs.frozen(kw_only=True)
class Prediction:
    """The predicted step of one layout; times in milliseconds, memory in bytes per rank."""

    step_time_ms: float
    tokens_per_s: float
    mfu: float | None
    peak_memory_bytes: int
    model_state_bytes: int
    activation_bytes: int
    buffer_bytes: int
    runtime_bytes: int
    compute_ms: float
    exposed_comm_ms: float
    bubble_ms: float
    optimizer_ms: float
    overhead_ms: float
    dominant: str
    comm_ms: dict = attrs.field(factory=dict)

    def as_dict(self) -> dict:
        return attrs.asdict(self)


@attrs.frozen
class Shape:
    """The layout's numbers the model needs, read once from a checked candidate."""

    tp: int
    pp: int
    cp: int
    dp: int
    dp_shard: int
    dp_replicate: int
    ep: int
    sp: bool
    micro_batch: int
    accumulation: int
    pipeline_microbatches: int
    schedule: str | None
    checkpointing: bool
    per_node: int
    sharding: str  # none, replicate (FSDP2 unsharded), grads, optimizer, full
    engine: str  # whose machinery: fsdp (FSDP2), zero (DeepSpeed), ddp (neither)
    syncs: int  # gradient reductions per step
    stages: tuple[int, ...]  # transformer blocks of each pipeline stage (core's split)

    @classmethod
    def of(cls, checked, strategy) -> "Shape":
        layout, candidate, parallel = checked.layout, checked.candidate, checked.config.parallel
        from mtb.api import pipeline_microbatches, stage_layers

        sequences = candidate.micro_batch_size * candidate.grad_accum_steps
        pipelined = layout.pp > 1
        microbatches = pipeline_microbatches(checked.config) if pipelined else 1
        stages = [len(blocks) for blocks in stage_layers(checked.config.model.n_layers, layout.pp)]
        accumulation = microbatches if pipelined else candidate.grad_accum_steps
        every = sync_mode(strategy, checked.config) == "every" and not pipelined
        return cls(
            tp=layout.tp,
            pp=layout.pp,
            cp=layout.cp,
            dp=layout.dp,
            dp_shard=layout.state_shards,
            dp_replicate=layout.dp_replicate,
            ep=layout.ep,
            sp=parallel.sequence_parallel,
            micro_batch=sequences // microbatches if pipelined else candidate.micro_batch_size,
            accumulation=accumulation,
            pipeline_microbatches=microbatches,
            schedule=parallel.pp_schedule if layout.pp > 1 else None,
            checkpointing=candidate.activation_checkpointing,
            per_node=candidate.nproc_per_node,
            sharding=sharding_of(strategy, layout),
            engine=engine_of(strategy, sharding_of(strategy, layout)),
            syncs=accumulation if every else 1,
            stages=tuple(stages),
        )

    @property
    def blocks(self) -> int:
        """Blocks on the fullest stage (what per-block communication is counted on)."""
        return max(self.stages)

    def scope(self, group: int, inner: int = 1) -> str:
        """``node`` when a group of ``group`` ranks, ``inner`` apart in rank order, fits a node."""
        return "node" if group * inner <= self.per_node else "cluster"


def sharding_of(strategy, layout) -> str:
    """What the strategy splits over the data-parallel shard ranks.

    A strategy that shards parameters (FSDP) keeps its machinery on one shard
    too (``replicate``: no gradient buckets, its hooks); one that shards none
    reduces whole gradients (``none``, DDP), as does a layout with no
    data-parallel or context-parallel ranks (``nd`` wraps nothing in FSDP then).
    """
    states = set(strategy.sharded_states)
    if "parameters" in states:
        if layout.dp * layout.cp == 1:  # nothing to shard or replicate over: not wrapped
            return "none"
        return "full" if layout.state_shards > 1 else "replicate"
    if layout.state_shards == 1 or not states:
        return "none"
    return "grads" if "gradients" in states else "optimizer"


def engine_of(strategy, sharding: str) -> str:
    """``zero`` for a strategy that runs on DeepSpeed (it requires it: zero1-3), ``fsdp`` for
    one whose parameters FSDP wraps, ``ddp`` otherwise: whose fixed costs a micro-batch pays."""
    if "deepspeed" in getattr(strategy, "requires", ()):
        return "zero"
    return "fsdp" if sharding in ("full", "replicate") else "ddp"


def sync_mode(strategy, config) -> str:
    """``every`` micro-batch or the ``last``: the config's, else the strategy's default
    (``default_sync_mode``; a strategy without one is taken to reduce every micro-batch)."""
    requested = config.training.gradient_sync_mode
    return requested if requested != "auto" else getattr(strategy, "default_sync_mode", "every")


def predict(checked, strategy, workload, profile) -> Prediction:
    """Step time and memory of one checked layout on the profile's machine."""
    from mtb.api import rank_parameter_count

    shape = Shape.of(checked, strategy)
    compute = profile.compute_for(shape.per_node)
    parameters = rank_parameter_count(checked.config.model, shape.tp, shape.pp)
    states = model_states(strategy, checked, parameters)
    micro_compute = micro_batch_compute_s(workload, shape, compute)
    comm = communication_s(workload, shape, profile, parameters)
    compute_s = micro_compute * shape.accumulation
    bubble_s = pipeline_s(micro_compute, shape, compute) - compute_s
    exposed = exposed_comm_s(comm, compute_s, compute)
    optimizer_s = states["optimizer_state"] * 2 / compute.optimizer_bytes_per_s
    overhead_s = fixed_costs_s(shape, profile, 4 * parameters)
    step_s = compute_s + sum(exposed.values()) + bubble_s + optimizer_s + overhead_s
    terms = {"compute_s": compute_s, "exposed": exposed, "bubble_s": bubble_s}
    terms.update(optimizer_s=optimizer_s, overhead_s=overhead_s, step_s=step_s)
    return _prediction(workload, shape, profile, states, parameters, terms)


def _prediction(
    workload, shape: Shape, profile, states: dict, parameters: int, terms: dict
) -> Prediction:
    stages = stage_activation_bytes(workload, shape)
    activations = max(stages)
    buffers = buffer_bytes(workload, shape, parameters)
    runtime = profile.runtime_for(shape.engine)
    besides = besides_gradients_bytes(shape, states, profile.device, workload.optimizer)
    step_s = terms["step_s"]
    costs = {
        "compute": terms["compute_s"],
        "bubble": terms["bubble_s"],
        "optimizer": terms["optimizer_s"],
        "overhead": terms["overhead_s"],
    }
    costs.update(terms["exposed"])
    tokens_per_s = workload.tokens_per_step / step_s
    return Prediction(
        step_time_ms=step_s * 1e3,
        tokens_per_s=tokens_per_s,
        mfu=None,
        peak_memory_bytes=int(
            runtime + _states_and_activations(shape, states, stages, besides) + buffers
        ),
        model_state_bytes=int(states["total"]),
        activation_bytes=int(activations),
        buffer_bytes=int(buffers),
        runtime_bytes=int(runtime),
        compute_ms=terms["compute_s"] * 1e3,
        exposed_comm_ms=sum(terms["exposed"].values()) * 1e3,
        bubble_ms=terms["bubble_s"] * 1e3,
        optimizer_ms=terms["optimizer_s"] * 1e3,
        overhead_ms=terms["overhead_s"] * 1e3,
        dominant=max(costs, key=costs.get),
        comm_ms={name: seconds * 1e3 for name, seconds in terms["exposed"].items()},
    )


def mechanisms(shape: Shape) -> tuple[str, ...]:
    """The mechanisms whose fixed cost a micro-batch of this layout pays besides ``base``."""
    active = {
        "fsdp": shape.engine == "fsdp" and shape.sharding == "full",
        "rep": shape.engine == "fsdp" and shape.sharding == "replicate",
        "zero": shape.engine == "zero" and shape.sharding != "full",
        "zero3": shape.engine == "zero" and shape.sharding == "full",
        "tp": shape.tp > 1,
        "sp": shape.sp,
        "pp": shape.pp > 1,
        "cp": shape.cp > 1,
        "ep": shape.ep > 1,
        "ac": shape.checkpointing,
    }
    return tuple(name for name, on in active.items() if on)


#: mechanisms a pipeline pays once a step, not per micro-batch: torch's pipeline stage neither
#: reshards an FSDP stage after a backward nor reduces its gradients until the last one
ONCE_PER_PIPELINE_STEP = ("fsdp",)


def fixed_cost_split(shape: Shape) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """This layout's mechanisms as (paid every micro-batch, paid once a step); base aside.

    Under a pipeline sharded FSDP is paid once; replicated FSDP (``rep``, measured on its
    own layout) each micro-batch as the rest: its hooks run on every micro-batch. Paying
    none of it (FSDP over a shard group of one gathers nothing) predicted tiny's
    ``rep2·pp2`` on 4 ranks at 29 ms where it measured 53-57 ms.
    """
    used = mechanisms(shape)
    if shape.pp == 1:
        return used, ()
    once = tuple(n for n in used if n in ONCE_PER_PIPELINE_STEP)
    return tuple(n for n in used if n not in ONCE_PER_PIPELINE_STEP), once


def micro_batches_paid(shape: Shape, compute) -> float:
    """How many times a step pays a per-micro-batch fixed cost: m without a pipeline. In a
    pipeline each stage pays its share of the blocks' machinery (the busiest stage's), and
    the stages overlap as their compute does: the share times the schedule's slots."""
    share = max(shape.stages) / sum(shape.stages)
    return share * pipeline_s(1.0, shape, compute)


def fixed_costs_s(shape: Shape, profile, parameter_bytes: float) -> float:
    """The step's fixed costs: base and most mechanisms per micro-batch, some once a step,
    and each one's cost once a step; never below 0. A mechanism's fitted part per
    micro-batch may be below 0, and so may a micro-batch's sum: the runs it was fitted on
    paid it so (a pipeline's stages, whose exchanges the send/recv curve prices above what
    they cost). Flooring each micro-batch at 0 put tiny's 4-rank pipelines 22-31 % slow."""
    per_micro, once = fixed_cost_split(shape)
    ranks = shape.per_node
    paid = micro_batches_paid(shape, profile.compute_for(ranks))
    each = profile.overhead_s(per_micro, ranks, parameter_bytes)
    step = profile.overhead_s(once, ranks, parameter_bytes, base=False)
    step += profile.step_overhead_s(per_micro + once, ranks)
    return max(0.0, paid * each + step)


def pipeline_s(micro_s: float, shape: Shape, compute) -> float:
    """A schedule's compute from the first forward to the last backward on one stage.

    GPipe and 1F1B both take m + pp - 1 slots of a micro-batch's forward and
    backward; in the fill and drain slots only some stages work. Where ranks
    share a node's cores the working ones then run faster (``solo_speedup``,
    interpolated by the share of the node's ranks that work).
    """
    slots = shape.accumulation + shape.pp - 1
    total = 0.0
    for slot in range(slots):
        busy = min(slot + 1, shape.pp, shape.accumulation, slots - slot)
        total += micro_s * _slowdown(busy / shape.pp, shape.per_node, compute.solo_speedup)
    return total


def _slowdown(working: float, per_node: int, solo_speedup: float) -> float:
    """A micro-batch's time relative to every rank of the node working, when a share
    ``working`` of them does: 1 / solo_speedup for one rank alone, 1 for all."""
    if per_node == 1 or working >= 1:
        return 1.0
    ranks = max(1.0, working * per_node)
    alone = 1 / solo_speedup
    return alone + (1 - alone) * (ranks - 1) / (per_node - 1)


def model_states(strategy, checked, parameters: int) -> dict:
    """Parameters, gradients and optimizer state one rank holds: the strategy's own formula."""
    from mtb.api import expert_parameter_count

    layout, model = checked.layout, checked.config.model
    experts = expert_parameter_count(model) if model.moe_experts else 0
    return strategy.state_bytes_estimate(
        parameters, layout.state_shards, checked.config.training, experts, layout.ep
    )


def micro_batch_compute_s(workload, shape: Shape, compute) -> float:
    """Forward and backward of one micro-batch on the busiest stage: the most blocks, or the
    last stage's fewer blocks and the head (core gives the remainder to the first stages).
    ``training_efficiency`` scales the arithmetic (FLOPs and bytes), not the operator calls:
    their cost inside a step is what the fixed costs measure at a negligible width."""
    block_forward = _block_s(workload, shape, compute)
    block_backward = _block_s(workload, shape, compute, backward=True)
    recompute = block_forward if shape.checkpointing else 0.0
    block = block_forward + block_backward + recompute
    head = _head_s(workload, shape, compute)
    last = len(shape.stages) - 1
    stages = [
        blocks * block + (head if i == last else 0.0) for i, blocks in enumerate(shape.stages)
    ]
    return max(stages)


def _timed_s(compute, arithmetic_s: float, ops: float) -> float:
    """Arithmetic at the operators' rates slowed by ``training_efficiency``, and the calls."""
    return arithmetic_s * compute.training_efficiency + ops * compute.op_overhead_s


def _block_s(workload, shape: Shape, compute, backward: bool = False) -> float:
    """One block's forward, or backward (twice the FLOPs, bytes and operator calls).

    GEMMs at the matmul rate, causal attention at the attention rate where the
    profile has one, element-wise bytes at the element-wise rate, plus the
    fixed cost of each operator call.
    """
    b, tp, cp = shape.micro_batch, shape.tp, shape.cp
    attention = workload.attention_flops(b, tp) / cp
    linear = workload.block_matmul_flops(b, tp, cp) - attention
    linear += _moe_extra_flops(workload, shape) / max(workload.n_layers, 1)
    elementwise = workload.block_elementwise_bytes(b, tp, shape.sp) / cp
    ops = BLOCK_FORWARD_OPS + (TP_BLOCK_FORWARD_OPS if tp > 1 else 0)
    if backward:
        matmul_rate = compute.matmul_backward_flops_per_s
        attention_rate = compute.attention_backward_flops_per_s or matmul_rate
        factor, ops = 2, ops * BACKWARD_OP_FACTOR
    else:
        matmul_rate = compute.matmul_flops_per_s
        attention_rate = compute.attention_flops_per_s or matmul_rate
        factor = 1
    arithmetic = factor * (
        linear / matmul_rate
        + attention / attention_rate
        + elementwise / compute.elementwise_bytes_per_s
    )
    return _timed_s(compute, arithmetic, ops)


def _moe_extra_flops(workload, shape: Shape) -> float:
    """FLOPs the MoE layers add over dense MLPs: each token through top-k experts, and routers."""
    if not workload.moe_layers:
        return 0.0
    tokens = shape.micro_batch * workload.seq_len / shape.cp
    mlp = 2 * tokens * 2 * workload.d_model * workload.hidden
    extra = (
        mlp * (workload.moe_top_k - 1 / shape.tp)
        + 2 * tokens * workload.d_model * workload.moe_experts
    )
    return workload.moe_layers * extra


def _head_s(workload, shape: Shape, compute) -> float:
    flops = 3 * workload.head_matmul_flops(shape.micro_batch, shape.tp) / shape.cp
    elementwise = 3 * workload.head_elementwise_bytes(shape.micro_batch) / shape.cp
    ops = (1 + BACKWARD_OP_FACTOR) * HEAD_FORWARD_OPS
    arithmetic = flops / compute.matmul_flops_per_s + elementwise / compute.elementwise_bytes_per_s
    return _timed_s(compute, arithmetic, ops)


#: collectives inside a stage's blocks (tensor, context and expert parallel). Under a
#: pipeline they stretch each of the schedule's m + pp - 1 slots as the stage's compute
#: does, fill and drain included; pp's own exchanges and FSDP's gathers are not among them:
#: ``pp``'s fixed cost, fitted on 1F1B pipeline runs with FSDP over the other ranks, holds
#: what the slots add to those. Paid m times, tiny's ``tp2·pp2 1f1b m2 mb8 ac`` on 4 ranks
#: was predicted at 77.0 ms where it measured 114.5 (-32.8 %)
IN_STAGE = ("tp", "cp", "ep")


def communication_s(workload, shape: Shape, profile, parameters: int) -> dict:
    """Seconds per step of each kind of communication, before any overlap.

    Keys name what the time is for: ``gradients`` (data-parallel gradient
    reduction, hideable under backward) and ``tp``, ``pp``, ``cp``, ``ep``,
    ``parameters`` (FSDP/ZeRO-3 gathers) and ``step`` (the per-step scalars),
    which the next operator waits for. Under a pipeline the collectives ``IN_STAGE`` are
    paid in every slot of the schedule, m + pp - 1 times a step.
    """
    terms = {
        "gradients": _gradient_s(shape, profile, parameters),
        "parameters": _parameter_gather_s(shape, profile, parameters),
        "tp": _tensor_parallel_s(workload, shape, profile),
        "pp": _pipeline_s(workload, shape, profile),
        "cp": _context_parallel_s(workload, shape, profile),
        "ep": _expert_parallel_s(workload, shape, profile),
        "step": _collective_s(
            profile,
            "all_reduce",
            shape.dp * shape.cp * shape.tp * shape.pp,
            STEP_SCALARS_BYTES,
            shape,
        ),
    }
    stretch = (shape.accumulation + shape.pp - 1) / shape.accumulation
    for name in IN_STAGE:
        terms[name] *= stretch
    return {name: seconds for name, seconds in terms.items() if seconds > 0}


def _collective_s(
    profile, collective: str, group: int, nbytes: float, shape: Shape, inner: int = 1
) -> float:
    if group <= 1 or nbytes <= 0:
        return 0.0
    scope = shape.scope(group, inner)
    running = shape.per_node if scope == "node" else None
    return profile.curve(collective, group, scope, running).time_s(nbytes)


def fsdp_units(shape: Shape) -> int:
    """Collectives FSDP issues for one pass over the parameters: one per unit, each block
    and the root (mtb's FSDP2 wrapping); ZeRO and DDP: counted as one."""
    return shape.blocks + 1 if shape.engine == "fsdp" else 1


def _per_unit_s(profile, collective: str, group: int, nbytes: float, shape: Shape, inner) -> float:
    """``nbytes`` moved as one collective per FSDP unit: each pays the latency."""
    units = fsdp_units(shape)
    return units * _collective_s(profile, collective, group, nbytes / units, shape, inner)


def _gradient_s(shape: Shape, profile, parameters: int) -> float:
    """Gradient reduction, ``syncs`` times a step: an all-reduce of every gradient over the
    data-parallel ranks (DDP, or FSDP unsharded), or a reduce-scatter over the shard group
    and, under HSDP, an all-reduce of the shards over the replicas; FSDP per unit."""
    gradient_bytes = 4 * parameters
    inner = shape.tp  # cp ranks join the shard group (Layout.state_shards)
    if shape.sharding in ("none", "replicate"):
        group = shape.dp * shape.cp
        return shape.syncs * _per_unit_s(profile, "all_reduce", group, gradient_bytes, shape, inner)
    shards = shape.dp_shard
    scatter = _per_unit_s(profile, "reduce_scatter", shards, gradient_bytes, shape, inner)
    replicas = _per_unit_s(
        profile, "all_reduce", shape.dp_replicate, gradient_bytes / shards, shape, inner * shards
    )
    return shape.syncs * (scatter + replicas)


def _parameter_gather_s(shape: Shape, profile, parameters: int) -> float:
    """Full sharding gathers each unit's parameters for forward and again for backward, per
    micro-batch; ZeRO-1/2 gather the updated shards once after the step."""
    if shape.sharding in ("none", "replicate"):
        return 0.0
    gather = _per_unit_s(profile, "all_gather", shape.dp_shard, 4 * parameters, shape, shape.tp)
    return gather * (2 * shape.accumulation if shape.sharding == "full" else 1)


def _tensor_parallel_s(workload, shape: Shape, profile) -> float:
    """Per block two all-reduces of the hidden states forward and two backward (sp: an
    all-gather and a reduce-scatter each); the vocabulary-split embedding's all-reduce and
    the gathered logits."""
    if shape.tp == 1:
        return 0.0
    tokens = shape.micro_batch * workload.seq_len / shape.cp
    hidden = tokens * workload.d_model * workload.element_bytes
    blocks = shape.blocks
    if shape.sp:
        per_block = 2 * (
            _collective_s(profile, "all_gather", shape.tp, hidden, shape)
            + _collective_s(profile, "reduce_scatter", shape.tp, hidden, shape)
        )
    else:
        per_block = 4 * _collective_s(profile, "all_reduce", shape.tp, hidden, shape)
    logits = tokens * workload.vocab_size * 4
    head = 2 * _collective_s(profile, "all_reduce", shape.tp, hidden, shape)
    head += 2 * _collective_s(profile, "all_gather", shape.tp, logits, shape)
    return shape.accumulation * (blocks * per_block + head)


def _pipeline_s(workload, shape: Shape, profile) -> float:
    """Each micro-batch's activations to the next stage and their gradients back."""
    if shape.pp == 1:
        return 0.0
    activations = shape.micro_batch * workload.seq_len / shape.cp * workload.d_model
    nbytes = activations * workload.element_bytes / (shape.tp if shape.sp else 1)
    inner = shape.tp * shape.cp * shape.dp
    return shape.accumulation * 2 * _collective_s(profile, "send_recv", 2, nbytes, shape, inner)


def _context_parallel_s(workload, shape: Shape, profile) -> float:
    """The ring: cp - 1 passes of this rank's K and V chunk per block forward, and of K, V
    and their gradients backward."""
    if shape.cp == 1:
        return 0.0
    tokens = shape.micro_batch * workload.seq_len / shape.cp
    kv = 2 * tokens * workload.d_model / shape.tp * workload.element_bytes
    blocks = shape.blocks
    passes = (shape.cp - 1) * (1 + 2)
    return (
        shape.accumulation
        * blocks
        * passes
        * _collective_s(profile, "send_recv", shape.cp, kv, shape, shape.tp)
    )


def _expert_parallel_s(workload, shape: Shape, profile) -> float:
    """Dispatch and combine all-to-alls of each MoE layer, forward and backward."""
    if shape.ep == 1 or not workload.moe_layers:
        return 0.0
    tokens = shape.micro_batch * workload.seq_len / shape.cp * workload.moe_top_k
    nbytes = tokens * workload.d_model * workload.element_bytes
    layers = math.ceil(workload.moe_layers / shape.pp)  # MoE blocks spread over the stages
    inner = shape.tp * shape.cp
    return (
        shape.accumulation
        * layers
        * 4
        * _collective_s(profile, "all_to_all", shape.ep, nbytes, shape, inner)
    )


def exposed_comm_s(comm: dict, compute_s: float, compute) -> dict:
    """What each kind of communication adds to the step: gradient reduction may hide
    ``comm_overlap`` of itself under backward (about 2/3 of compute); the rest is waited for."""
    overlap = compute.comm_overlap
    exposed = dict(comm)
    if "gradients" in exposed:
        hidden = overlap * min(exposed["gradients"], compute_s * 2 / 3)
        exposed["gradients"] -= hidden
    return exposed


def stage_activation_bytes(workload, shape: Shape) -> list[float]:
    """What autograd holds on each stage at its peak (one stage without a pipeline).

    Without a pipeline one micro-batch's activations. GPipe keeps every
    micro-batch's until backward; 1F1B keeps pp - i on stage i (the first
    stage the most). The head's activations are the last stage's. With
    activation checkpointing a block keeps only its input, plus one block's
    activations while it is recomputed.
    """
    per_block = workload.block_activation_bytes(shape.micro_batch, shape.tp, shape.sp, shape.cp)
    if shape.checkpointing:
        tokens = shape.micro_batch * workload.seq_len / shape.cp
        inputs = tokens * workload.d_model * workload.element_bytes
    last = len(shape.stages) - 1
    peaks = []
    for stage, blocks in enumerate(shape.stages):
        held = blocks * inputs + per_block if shape.checkpointing else blocks * per_block
        if stage == last:
            held += workload.head_activation_bytes(shape.micro_batch, shape.cp)
        peaks.append(held * _in_flight(shape, stage))
    return peaks


def _states_and_activations(
    shape: Shape, states: dict, stages: list[float], besides: float = 0.0
) -> float:
    """Model states and activations at the peak of the fullest stage (``stages``: each
    stage's activations at its peak); gradients and activations add up only on a stage
    that runs a forward after a backward of the same step.

    The trainer sets gradients to None after each step, so a step's first forward saves its
    activations with no gradients held, and backward frees activations as it makes
    gradients. A stage that runs all of its m micro-batches' forwards before its first
    backward (one micro-batch a step, GPipe, 1F1B's first stages when m <= pp) holds the
    larger of its activations and the gradients beside the other micro-batches'
    activations. Where a forward follows a backward (accumulation, 1F1B's later
    micro-batches) it saves activations beside the gradients. Once the activations are freed
    the step holds the gradients and ``besides``: the optimizer's temporaries, or what
    FSDP2 keeps to the end of a backward (``besides_gradients_bytes``).
    """
    gradients = states.get("gradients", 0)
    m = shape.accumulation
    held = []
    for stage, activations in enumerate(stages):
        first = _in_flight(shape, stage)  # forwards before the stage's first backward
        if m > first:
            held.append(activations + gradients + accumulated_gradient_bytes(shape, states))
        else:
            held.append(max(activations, gradients + activations * (first - 1) / first))
    return states["total"] - gradients + max(*held, gradients + besides)


def accumulated_gradient_bytes(shape: Shape, states: dict) -> float:
    """What DeepSpeed's ZeRO-1/2 keeps between the micro-batches of an accumulating step
    beside its gradient partition: each parameter's whole gradient, the size of the
    parameters. Measured on small (capped runs): accumulating ZeRO-2 peaked at 854-855 MiB
    on 2 ranks for 1 x 2, 1 x 4 and 2 x 2 micro-batches and 768 on 4 ranks, 101-185 MiB over
    the model without it; with it, -4.3 to +4.1 % (ZeRO-1's 1 x 2 +1.7 %), and -8.3 % for
    ZeRO-2 at 1 x 2 with activation checkpointing."""
    accumulating = "zero" in mechanisms(shape) and shape.accumulation > 1
    return states.get("parameters", 0) if accumulating else 0.0


def besides_gradients_bytes(shape: Shape, states: dict, device: str, optimizer: str) -> float:
    """The most a step holds beside its gradients once its activations are freed."""
    return max(
        optimizer_temporary_bytes(shape, states, device, optimizer),
        held_reduce_bytes(shape, states),
    )


def held_reduce_bytes(shape: Shape, states: dict) -> float:
    """What FSDP2 under HSDP keeps to the end of a backward: each unit's reduce output, held for
    its all-reduce over the replicas until the backward ends (torch's ``_all_reduce_state``).
    On a step's first micro-batch the gradients are those outputs; on a later micro-batch
    of an accumulating step, reducing every micro-batch, they are added into the gradients,
    so a second copy of the gradients is live when the backward ends."""
    if shape.engine == "fsdp" and shape.dp_replicate > 1 and shape.syncs > 1:
        return states.get("gradients", 0)
    return 0.0


def optimizer_temporary_bytes(shape: Shape, states: dict, device: str, optimizer: str) -> float:
    """What the optimizer step allocates beside the states. torch's AdamW on CUDA takes its
    multi-tensor (foreach) path, whose square root of the second moment is a copy of every
    parameter the rank updates (4 bytes each: half of AdamW's 8 bytes of state). On CPU it
    updates one parameter at a time (one parameter's temporary, not counted); DeepSpeed's
    fused AdamW updates in place."""
    if device != "cuda" or optimizer != "adamw" or shape.engine == "zero":
        return 0.0
    return states.get("optimizer_state", 0) / 2


def _in_flight(shape: Shape, stage: int) -> int:
    """Micro-batches whose activations stage ``stage`` holds at once."""
    if shape.schedule is None:
        return 1
    if shape.schedule == "gpipe":
        return shape.pipeline_microbatches
    return min(shape.pp - stage, shape.pipeline_microbatches)


def buffer_bytes(workload, shape: Shape, parameters: int) -> float:
    """Buffers beside the model states at the peak: the gradient of the logits (the largest
    activation gradient); under full sharding two blocks' gathered parameters (one in use,
    one prefetched); without sharding, data parallelism's gradient buckets (DDP's reducer
    copies every gradient into its buckets); DeepSpeed's, ``zero_buffer_bytes``."""
    logits = shape.micro_batch * workload.seq_len / shape.cp * workload.vocab_size * 4
    if shape.engine == "zero":
        return logits + zero_buffer_bytes(shape, parameters)
    if shape.sharding == "full":
        return logits + 4 * parameters / max(workload.n_layers, 1) * 2
    if shape.sharding == "none" and shape.dp * shape.cp > 1:  # not FSDP2's replicate
        return logits + 4 * parameters
    return logits


#: DeepSpeed's defaults, in elements: ZeRO-3's live gathered parameters and the reduce bucket
ZERO_MAX_LIVE_PARAMETERS = 10**9
ZERO_REDUCE_BUCKET = 5 * 10**8


def zero_buffer_bytes(shape: Shape, parameters: int) -> float:
    """DeepSpeed's buffers beside the model states, fp32, at its default sizes. ZeRO-3 keeps
    the gathered parameters live (up to 1e9 elements) and copies the gradients into its
    reduce bucket (up to 5e8) before the reduce-scatter; ZeRO-1/2 hold nothing at the peak
    beyond their states. Measured on small (23 million parameters, 2 ranks, against
    ``zero_runtime_bytes``, DeepSpeed's own runtime): ZeRO-1 and ZeRO-2 12 MiB beyond their
    states, activations and logits (1.3 % of the peak), ZeRO-3 about three copies of the
    parameters."""
    if shape.sharding != "full":
        return 0.0
    bucket = min(parameters, ZERO_REDUCE_BUCKET)
    return 4 * (min(parameters, ZERO_MAX_LIVE_PARAMETERS) + 2 * bucket)
