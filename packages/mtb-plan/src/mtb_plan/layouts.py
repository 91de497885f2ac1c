"""Every layout of a world size, each kept or pruned by the runtime's own checks.

A candidate is a set of ``mtb run`` options: the strategy, the mesh (for a
strategy that takes model dimensions: pp, dp_replicate, dp_shard, cp, tp,
sequence parallelism, the pipeline schedule and its micro-batches), expert
parallelism for an MoE model, the micro-batch size with the accumulation that
keeps the global batch, and activation checkpointing. Each goes through what
``mtb run`` checks before it launches (the config's own validation, the
strategy's ``check`` and ``check_layout``), so a pruned layout carries the
exact line ``mtb run`` would have printed.
"""

import itertools

import attrs

from mtb.api import ConfigError, Layout, UsageError, resolve_config

#: the pipeline schedules a plan tries, with micro-batches per step as a multiple of pp
PIPELINE_SCHEDULES = ("gpipe", "1f1b")
PIPELINE_MICROBATCHES = (1, 2)
MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


@attrs.frozen(kw_only=True)
class Candidate:
    """One layout as ``mtb run`` options (``parallel`` holds the mesh of an N-D strategy)."""

    strategy: str
    nnodes: int = 1
    nproc_per_node: int
    parallel: tuple[tuple[str, object], ...] = ()
    micro_batch_size: int
    grad_accum_steps: int = 1
    activation_checkpointing: bool = False

    @property
    def mesh(self) -> dict:
        return dict(self.parallel)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def flags(self, workload) -> dict:
        """The config flags ``mtb.api.resolve_config`` takes (the TOML file's shape)."""
        return {
            "strategy": self.strategy,
            "preset": workload.preset,
            "launch": {
                "nproc_per_node": self.nproc_per_node,
                "nnodes": self.nnodes,
                **_meeting(self),
            },
            "data": {"micro_batch_size": self.micro_batch_size},
            "training": {
                "grad_accum_steps": self.grad_accum_steps,
                "activation_checkpointing": self.activation_checkpointing,
                "precision": workload.precision,
                "optimizer": workload.optimizer,
            },
            "parallel": self.mesh,
            "model": dict(workload.overrides),
        }

    def options(self) -> dict:
        """The ``mtb run`` options (flags without dashes), as a matrix cell takes them."""
        options = {
            "strategy": self.strategy,
            "nproc_per_node": self.nproc_per_node,
            "micro_batch_size": self.micro_batch_size,
            "grad_accum_steps": self.grad_accum_steps,
            "activation_checkpointing": self.activation_checkpointing,
        }
        if self.nnodes > 1:
            options["nnodes"] = self.nnodes
        return {**options, **self.mesh}

    @property
    def label(self) -> str:
        """``fsdp mb2``, ``nd dp2·tp2 sp mb1 ×2 ac``, ``nd pp2 1f1b m4 mb4``."""
        mesh = self.mesh
        layout = Layout(**{dim: mesh.get(dim, 1) for dim in (*MESH_DIMS, "ep")})
        parts = [self.strategy]
        if self.strategy == "nd" or layout.label != "dp1":
            parts.append(layout.label)
        if mesh.get("sequence_parallel"):
            parts.append("sp")
        if layout.pp > 1:
            parts.append(f"{mesh['pp_schedule']} m{mesh['pp_microbatches']}")
        parts.append(f"mb{self.micro_batch_size}")
        if self.grad_accum_steps > 1:
            parts.append(f"×{self.grad_accum_steps}")
        if self.activation_checkpointing:
            parts.append("ac")
        return " ".join(parts)


def _meeting(candidate: Candidate) -> dict:
    """A multi-node layout is checked with a stand-in rendezvous: where the nodes meet is
    decided when it runs (the Slurm executor picks the first node), not by the plan."""
    return {"rdzv_endpoint": "first-node:29500"} if candidate.nnodes > 1 else {}


@attrs.frozen
class Checked:
    """A candidate with its resolved config and layout, or the runtime's reason to refuse it."""

    candidate: Candidate
    config: object = None
    layout: Layout | None = None
    refused: str | None = None


def enumerate_layouts(pm, workload, nnodes: int, per_node: int, device: str) -> list[Checked]:
    """Every candidate on ``nnodes`` x ``per_node`` ranks, checked as ``mtb run`` would."""
    registry = pm.registry("strategy")
    return [
        check(registry, candidate, workload, device)
        for entry in registry
        for candidate in candidates(entry.item, workload, nnodes, per_node)
    ]


def candidates(strategy, workload, nnodes: int, per_node: int):
    """The meshes a strategy can be asked for, times micro-batch sizes and AC on/off."""
    world = nnodes * per_node
    for mesh in meshes(strategy, workload, world):
        data_parallel = _data_parallel(mesh, world)
        for micro_batch in micro_batches(workload, data_parallel, mesh):
            for checkpointing in (False, True):
                yield Candidate(
                    strategy=strategy.name,
                    nnodes=nnodes,
                    nproc_per_node=per_node,
                    parallel=tuple(sorted(mesh.items())),
                    micro_batch_size=micro_batch,
                    grad_accum_steps=workload.global_batch // data_parallel // micro_batch,
                    activation_checkpointing=checkpointing,
                )


def meshes(strategy, workload, world: int):
    """Data parallel over every rank, expert parallelism over some, and with model
    dimensions every factorisation of the world into (pp, dp_replicate, dp_shard, cp, tp)."""
    model_dims = [
        dim for dim in ("dp_replicate", "cp", "tp", "pp") if dim in strategy.parallel_dims
    ]
    for ep in _expert_degrees(strategy, workload, world):
        extra = {"ep": ep} if ep > 1 else {}
        if not model_dims:
            yield extra
            continue
        for sizes in factorisations(world, len(MESH_DIMS)):
            mesh = dict(zip(MESH_DIMS, sizes, strict=True))
            if any(
                mesh[dim] > 1 for dim in ("dp_replicate", "cp", "tp", "pp") if dim not in model_dims
            ):
                continue
            yield from _with_options({**mesh, **extra})


def _with_options(mesh: dict):
    """Sequence parallelism on and off under tp; each schedule and micro-batch count under pp."""
    for sp in (False, True) if mesh["tp"] > 1 else (False,):
        with_sp = {**mesh, "sequence_parallel": True} if sp else mesh
        if mesh["pp"] == 1:
            yield with_sp
            continue
        for schedule, per_stage in itertools.product(PIPELINE_SCHEDULES, PIPELINE_MICROBATCHES):
            yield {**with_sp, "pp_schedule": schedule, "pp_microbatches": per_stage * mesh["pp"]}


def _expert_degrees(strategy, workload, world: int) -> list[int]:
    if not workload.moe_experts or "ep" not in strategy.parallel_dims:
        return [1]
    return [ep for ep in range(1, world + 1) if world % ep == 0]


def factorisations(number: int, parts: int):
    """Every ordered tuple of ``parts`` positive integers whose product is ``number``."""
    if parts == 1:
        yield (number,)
        return
    for first in range(1, number + 1):
        if number % first == 0:
            for rest in factorisations(number // first, parts - 1):
                yield (first, *rest)


def _data_parallel(mesh: dict, world: int) -> int:
    """Ranks that see different batches: the world over the model dimensions."""
    model = mesh.get("pp", 1) * mesh.get("cp", 1) * mesh.get("tp", 1)
    return max(1, world // model)


def micro_batches(workload, data_parallel: int, mesh: dict) -> list[int]:
    """Each divisor of a data-parallel rank's share of the global batch (none where the ranks
    cannot share it evenly); a pipeline takes the whole share and splits it itself."""
    share, left = divmod(workload.global_batch, data_parallel)
    if left or not share:
        return []
    if mesh.get("pp", 1) > 1:
        return [share]
    return [size for size in range(1, share + 1) if share % size == 0]


def check(registry, candidate: Candidate, workload, device: str) -> Checked:
    """The candidate through the checks ``mtb run`` makes before launch, in its order: the
    config, the strategy's availability and ``check``, the layout, ``check_layout``."""
    try:
        config = resolve_config(flags=candidate.flags(workload))
        strategy = registry.get(candidate.strategy)
        strategy.check(config, device)
        layout = Layout.of(config)
        strategy.check_layout(layout)
    except (ConfigError, UsageError) as refused:
        return Checked(candidate, refused=str(refused))
    return Checked(candidate, config=config, layout=layout)
