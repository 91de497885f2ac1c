"""The parallel layout of a run: mesh dimensions, rank order, checks.

One layout per run, resolved from ``[parallel]`` and the world size, checked
against the model before any process starts, and written into the result. The
rank order is Megatron-LM's default: tensor parallel varies fastest, then context
parallel, then data parallel (replicate outside shard), then pipeline parallel, so

    rank = tp_rank + tp x (cp_rank + cp x (dp_shard_rank + dp_shard x (dp_replicate_rank
           + dp_replicate x pp_rank)))

Context-parallel peers hold chunks of the same sequences, so they share their
data-parallel rank (and batch), as tensor- and pipeline-parallel peers do.

Expert parallelism is no factor of the world size: ``ep`` ranks are carved out
of the data-parallel ranks (they see different batches), as torchtitan does.
This module needs no torch; a strategy builds its ``DeviceMesh`` from
:attr:`Layout.mesh_shape` and :attr:`Layout.mesh_dim_names`.
"""

import itertools

import attrs

from mtb.errors import ConfigError

#: mesh dimensions, slowest-varying first (the order of ``init_device_mesh``)
MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
#: the rank order written into results, fastest first
RANK_ORDER = "tp-cp-dp-pp"
#: how each dimension is named in a layout's label, in label order
LABELS = (
    ("dp_replicate", "rep"),
    ("dp_shard", "dp"),
    ("cp", "cp"),
    ("tp", "tp"),
    ("pp", "pp"),
    ("ep", "ep"),
)
#: dimensions beyond plain data parallelism that a strategy must declare it takes
MODEL_DIMS = ("dp_replicate", "cp", "tp", "pp", "ep")


@attrs.frozen(kw_only=True)
class Layout:
    """Sizes of each mesh dimension, resolved (no -1)."""

    dp_replicate: int = 1
    dp_shard: int = 1
    cp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1

    @classmethod
    def of(cls, config, world_size: int | None = None) -> "Layout":
        """The layout of ``config`` on ``world_size`` ranks, or one ConfigError naming it."""
        parallel = config.parallel
        world = config.launch.world_size if world_size is None else world_size
        dp_shard = _resolve_shard(parallel, world)
        layout = cls(
            dp_replicate=parallel.dp_replicate,
            dp_shard=dp_shard,
            cp=parallel.cp,
            tp=parallel.tp,
            pp=parallel.pp,
            ep=parallel.ep,
        )
        if layout.world_size != world:
            raise ConfigError(
                "parallel",
                f"dp_replicate {layout.dp_replicate} x dp_shard {dp_shard} x cp {layout.cp} "
                f"x tp {layout.tp} x pp {layout.pp} = {layout.world_size} must equal the "
                f"world size {world}",
            )
        _check_model(layout, config)
        _check_context(layout, config)
        _check_pipeline(layout, config)
        if layout.dp % layout.ep:
            raise ConfigError(
                "parallel.ep",
                f"{layout.ep} must divide the data-parallel size {layout.dp} "
                "(dp_replicate x dp_shard)",
            )
        _check_experts(layout, config)
        return layout

    @property
    def dp(self) -> int:
        """Ranks that see different data: replicas times shards."""
        return self.dp_replicate * self.dp_shard

    @property
    def state_shards(self) -> int:
        """Ranks a sharding strategy splits model state over: dp_shard, times cp (whose
        ranks hold the same parameters and join the shard dimension)."""
        return self.dp_shard * self.cp

    @property
    def world_size(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        return tuple(getattr(self, dim) for dim in MESH_DIMS)

    @property
    def mesh_dim_names(self) -> tuple[str, ...]:
        return MESH_DIMS

    @property
    def label(self) -> str:
        """Short name of the layout, e.g. ``dp2·tp2`` (``dp1`` for one process)."""
        parts = [f"{name}{getattr(self, dim)}" for dim, name in LABELS if getattr(self, dim) > 1]
        return "·".join(parts) or "dp1"

    def coordinates(self, rank: int) -> dict[str, int]:
        """This rank's index along each mesh dimension."""
        coords = {}
        for dim in reversed(MESH_DIMS):
            size = getattr(self, dim)
            coords[dim] = rank % size
            rank //= size
        return {dim: coords[dim] for dim in MESH_DIMS}

    def dp_rank(self, rank: int) -> int:
        """Index among the data-parallel ranks: tp and pp peers share it (and their batch)."""
        at = self.coordinates(rank)
        return at["dp_replicate"] * self.dp_shard + at["dp_shard"]

    def counts_tokens(self, rank: int) -> bool:
        """One rank per data-parallel rank (cp 0, tp 0, pp 0) stands for its batch in token
        counts."""
        at = self.coordinates(rank)
        return at["cp"] == 0 and at["tp"] == 0 and at["pp"] == 0

    def routes_own_tokens(self, rank: int) -> bool:
        """One rank of each tp group stands for the tokens its peers route too (tp ranks
        run an MoE layer's router on the same tokens); cp ranks route their own."""
        return self.coordinates(rank)["tp"] == 0

    def beyond_data_parallel(self) -> list[str]:
        """The dimensions above 1 that a pure data-parallel strategy cannot take."""
        return [dim for dim in MODEL_DIMS if getattr(self, dim) > 1]

    def as_dict(self) -> dict:
        """The layout as the result document records it."""
        return {
            **attrs.asdict(self),
            "dp": self.dp,
            "label": self.label,
            "mesh_dims": list(MESH_DIMS),
            "rank_order": RANK_ORDER,
        }


def _resolve_shard(parallel, world: int) -> int:
    if parallel.dp_shard != -1:
        return parallel.dp_shard
    others = parallel.dp_replicate * parallel.cp * parallel.tp * parallel.pp
    if world % others:
        raise ConfigError(
            "parallel.dp_shard",
            f"-1 needs dp_replicate {parallel.dp_replicate} x cp {parallel.cp} x tp "
            f"{parallel.tp} x pp {parallel.pp} = {others} to divide the world size {world}",
        )
    return world // others


def _check_model(layout: Layout, config) -> None:
    model = config.model
    for field in ("n_heads", "d_model"):
        value = getattr(model, field)
        if value % layout.tp:
            raise ConfigError("parallel.tp", f"{layout.tp} must divide model.{field}={value}")
    if config.parallel.sequence_parallel and layout.tp == 1:
        raise ConfigError("parallel.sequence_parallel", "needs parallel.tp > 1")


def _check_context(layout: Layout, config) -> None:
    """cp splits each sequence into 2 x cp equal chunks (rank i holds i and 2cp-1-i)."""
    if layout.cp == 1:
        return
    seq_len, chunks = config.model.seq_len, 2 * layout.cp
    if seq_len % chunks:
        raise ConfigError(
            "parallel.cp",
            f"{layout.cp}: 2 x cp = {chunks} chunks must divide model.seq_len={seq_len}",
        )
    if config.model.dropout:
        raise ConfigError(
            "parallel.cp",
            f"{layout.cp}: ring attention applies no dropout; needs model.dropout=0 "
            f"(got {config.model.dropout})",
        )


def _check_pipeline(layout: Layout, config) -> None:
    parallel = config.parallel
    stages = layout.pp * parallel.pp_stages_per_rank
    interleaved = parallel.pp_schedule == "interleaved-1f1b"
    if interleaved != (parallel.pp_stages_per_rank > 1):
        raise ConfigError(
            "parallel.pp_stages_per_rank",
            f"{parallel.pp_stages_per_rank} with pp_schedule {parallel.pp_schedule!r}: "
            "more than 1 stage per rank is the interleaved-1f1b schedule, and it needs more than 1",
        )
    if layout.pp == 1:
        return
    if stages > config.model.n_layers:
        raise ConfigError(
            "parallel.pp",
            f"pp {layout.pp} x pp_stages_per_rank {parallel.pp_stages_per_rank} = {stages} "
            f"stages must be <= model.n_layers={config.model.n_layers}",
        )
    microbatches = microbatches_of(config)
    sequences = config.data.micro_batch_size * config.training.grad_accum_steps
    if sequences % microbatches:
        raise ConfigError(
            "parallel.pp_microbatches",
            f"{microbatches} must divide the sequences of a step on one data-parallel rank, "
            f"data.micro_batch_size x training.grad_accum_steps = {sequences}",
        )
    if parallel.pp_schedule != "gpipe" and microbatches < stages:
        raise ConfigError(
            "parallel.pp_microbatches",
            f"{microbatches} is fewer than the {stages} pipeline stages; "
            f"{parallel.pp_schedule} needs at least one micro-batch per stage",
        )
    rounds = max(1, microbatches // layout.pp)
    if interleaved and microbatches % rounds:
        raise ConfigError(
            "parallel.pp_microbatches",
            f"{microbatches} with interleaved-1f1b on pp {layout.pp} must be a multiple of its "
            f"{rounds} rounds (pp_microbatches // pp); a multiple of pp {layout.pp} always is",
        )
    if config.training.precision == "fp16":
        raise ConfigError(
            "training.precision",
            "fp16 is not supported with pipeline parallelism (its loss scaler would span "
            "stages); use bf16 or fp32",
        )


def _check_experts(layout: Layout, config) -> None:
    """ep shards the experts of every MoE layer: there must be experts, in equal shares."""
    experts = config.model.moe_experts
    if layout.ep > 1 and (not experts or experts % layout.ep):
        what = f"model.moe_experts={experts}" if experts else "an MoE model (model.moe_experts > 0)"
        raise ConfigError("parallel.ep", f"{layout.ep} must divide {what}")


def microbatches_of(config) -> int:
    """Micro-batches per step of a pipeline schedule (default: one per stage)."""
    parallel = config.parallel
    if parallel.pp_microbatches is not None:
        return parallel.pp_microbatches
    return parallel.pp * parallel.pp_stages_per_rank


def stage_layers(n_layers: int, stages: int) -> list[range]:
    """The blocks of each pipeline stage: an even split, earlier stages taking the remainder."""
    base, extra = divmod(n_layers, stages)
    bounds = [0]
    for stage in range(stages):
        bounds.append(bounds[-1] + base + (stage < extra))
    return [range(start, stop) for start, stop in itertools.pairwise(bounds)]
