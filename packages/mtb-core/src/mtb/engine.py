"""The engine a strategy returns: a step's forward and backward, optimizer step, state.

``Engine`` implements the contract for a plain module and optimizer, with
autocast for bf16/fp16 and a gradient scaler for fp16; strategies that wrap
the model (DDP, FSDP) subclass it and override only what differs. The trainer
hands an engine a whole step's micro-batches (:meth:`Engine.forward_backward`),
so an engine that schedules them itself (a pipeline) can.
"""

import contextlib
from collections.abc import Callable
from typing import ClassVar

import attrs
import torch

from mtb.data import Batch

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@attrs.define
class StepInfo:
    """What an optimizer step reports back to the trainer."""

    grad_norm: float | None = None
    clipped: bool = False
    skipped: bool = False
    #: gradient synchronisations issued during the step, counted (None: not counted)
    gradient_syncs: int | None = None


def _no_range(name: str):
    return contextlib.nullcontext()


def _unchanged(loss: torch.Tensor, micro: int) -> torch.Tensor:
    return loss


@attrs.frozen
class StepHooks:
    """What the trainer lends :meth:`Engine.forward_backward` for one step.

    ``range(name)`` opens a named profiler range (a null context when the
    trial is not profiled); ``on_loss(loss, micro)`` returns the loss of
    micro-batch ``micro`` as the trainer wants it used (fault injection
    poisons it), and must see every micro-batch's loss before its backward.
    """

    range: Callable = _no_range
    on_loss: Callable[[torch.Tensor, int], torch.Tensor] = _unchanged


#: no profiler ranges, losses used as computed
NO_HOOKS = StepHooks()


@attrs.define
class ModelStateBytes:
    """Bytes of model state held by this rank (local shards only)."""

    parameters: int
    gradients: int
    optimizer_state: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state


def make_optimizer(params, training) -> torch.optim.Optimizer:
    """The optimizer the training config names, over ``params``."""
    if training.optimizer == "sgd":
        return torch.optim.SGD(params, lr=training.lr, weight_decay=training.weight_decay)
    return torch.optim.AdamW(params, lr=training.lr, weight_decay=training.weight_decay)


def local_bytes(tensor: torch.Tensor) -> int:
    """Bytes of the part of ``tensor`` stored on this rank (DTensor: its local shard)."""
    local = _local(tensor)
    return local.numel() * local.element_size()


def cpu_copy(state: dict) -> dict:
    """Detached CPU copies of a state dict's tensors."""
    return {name: tensor.detach().cpu().clone() for name, tensor in state.items()}


@torch.no_grad()
def total_norm(grads: list) -> torch.Tensor:
    """The 2-norm of ``grads``; of DTensor gradients, this rank's share, left unreduced.

    Each rank takes the squares of the gradient elements it holds, divided by
    how many ranks hold the same elements (a DTensor replicated along a mesh
    dimension; a plain tensor beside DTensors, held by every rank), so the
    sum of squares over the world counts each element once, on any mesh and
    any mix of meshes. The result is a partial DTensor over the whole world:
    the trainer carries its reduction in the all_reduce it makes anyway.

    It runs every step, so it stays cheap: without autograd (``to_local``
    outside no_grad is an autograd function, about 10 us per gradient) and
    with the holders worked out once per layout (mesh and placements), not
    once per gradient.
    """
    from torch.distributed.tensor import DTensor

    if not any(isinstance(g, DTensor) for g in grads):
        return torch.nn.utils.get_total_norm(grads)
    from torch.distributed.tensor._ops._math_ops import _NormPartial

    world = torch.distributed.get_world_size()
    by_holders: dict[int, list] = {}
    holders_of: dict[tuple, int] = {}
    for grad in grads:
        layout = (getattr(grad, "device_mesh", None), getattr(grad, "placements", None))
        holders = holders_of.get(layout)
        if holders is None:
            holders = holders_of[layout] = _holders(grad, world)
        by_holders.setdefault(holders, []).append(_local(grad))
    squares = torch.stack(
        [
            torch.nn.utils.get_total_norm(local).float().square() / holders
            for holders, local in by_holders.items()
        ]
    ).sum()
    mesh = _world_mesh(grads, world)
    return DTensor.from_local(squares.sqrt(), mesh, [_NormPartial(2)], run_check=False)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _holders(grad, world: int) -> int:
    """Ranks holding each element of ``grad``: the world over its shards.

    Every placement but Replicate splits (Shard, a strided shard); gradients
    are never Partial once backward has finished.
    """
    placements = getattr(grad, "placements", None)
    if placements is None:
        return world
    shards = 1
    for size, placement in zip(grad.device_mesh.shape, placements, strict=True):
        shards *= 1 if placement.is_replicate() else size
    return world // shards


def _world_mesh(grads: list, world: int):
    """A 1-D mesh over every rank: the gradients' own when they have one (FSDP's), else new."""
    from torch.distributed.device_mesh import DeviceMesh

    for grad in grads:
        mesh = getattr(grad, "device_mesh", None)
        if mesh is not None and mesh.ndim == 1 and mesh.size() == world:
            return mesh
    return DeviceMesh(grads[0].device.type, list(range(world)))


def clip_grads(params: list, max_norm: float, norm: float) -> None:
    """Scale gradients by max_norm / norm when above it, one group per device mesh.

    DTensor arithmetic takes operands on one mesh only: tensor-parallel,
    data-parallel and plain gradients each scale by the norm placed on theirs.
    """
    groups: dict = {}
    for param in params:
        groups.setdefault(getattr(param.grad, "device_mesh", None), []).append(param)
    for mesh, group in groups.items():
        torch.nn.utils.clip_grads_with_norm_(group, max_norm, _whole(mesh, norm))


def _whole(mesh, value: float) -> torch.Tensor:
    """``value`` as a tensor on ``mesh``, replicated on each of its dimensions (None: plain)."""
    if mesh is None:
        return torch.tensor(value)
    from torch.distributed.tensor import DTensor, Replicate

    local = torch.tensor(value, device=mesh.device_type)
    return DTensor.from_local(local, mesh, [Replicate()] * mesh.ndim, run_check=False)


def norm_shard(norm) -> tuple[torch.Tensor | None, bool]:
    """This rank's part of a gradient norm, and whether the parts are shards.

    Sharded gradients (DTensors, see :func:`total_norm`) give a partial
    2-norm over the whole world: each rank holds its share's norm and the model's is the root of
    their sum of squares, which the trainer folds into its one per-step
    all_reduce instead of a reduction of its own. Other DTensor layouts are
    reduced here; a plain tensor is already the whole model's norm.
    """
    placements = getattr(norm, "placements", None)
    if placements is None:
        return norm, False
    shards = len(placements) == 1 and getattr(placements[0], "norm_type", None) == 2
    if shards and norm.device_mesh.size() == torch.distributed.get_world_size():
        return norm.to_local(), True
    return norm.full_tensor(), False


def _unique(tensors):
    seen = set()
    for tensor in tensors:
        if tensor is not None and id(tensor) not in seen:
            seen.add(id(tensor))
            yield tensor


class Engine:
    """A model and its optimizer, driven by the trainer one step at a time."""

    #: fields of torch's ``StateDictOptions`` for the DCP checkpoint's get/set_state_dict
    state_dict_options: ClassVar[dict] = {}

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, context):
        self.model = model
        self.optimizer = optimizer
        self.context = context
        self.precision = context.config.training.precision
        self.device_type = context.device.type
        self.scaler = torch.amp.GradScaler(self.device_type) if self.precision == "fp16" else None

    def autocast(self):
        dtype = AUTOCAST_DTYPES.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=dtype)

    def forward_backward(self, batches: list[Batch], hooks: StepHooks = NO_HOOKS):
        """Forward and backward over one step's micro-batches; their mean loss, detached.

        Gradients accumulate as if the micro-batches were one batch (each loss
        divided by their number). This loop is the default; an engine that
        schedules micro-batches itself (a pipeline) overrides it.
        """
        count = len(batches)
        total = torch.zeros((), device=self.context.device)
        for micro, batch in enumerate(batches):
            last = micro == count - 1
            with hooks.range(f"mtb.micro_batch.{micro}"), self.sync_context(last):
                with hooks.range("mtb.forward"):
                    loss = hooks.on_loss(self.forward(batch), micro)
                with hooks.range("mtb.backward"):
                    self.backward(loss / count)
            total += loss.detach().float()
        return total / count

    def forward(self, batch: Batch) -> torch.Tensor:
        with self.autocast():
            return self.model(batch.inputs, batch.targets)

    def backward(self, loss: torch.Tensor) -> None:
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def sync_context(self, is_last_micro_batch: bool):
        """Context for one micro-batch; data-parallel engines skip gradient sync in it."""
        return contextlib.nullcontext()

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def grad_norm(self) -> torch.Tensor | None:
        """Global L2 norm of the (unscaled) gradients, equal on every rank.

        With sharded gradients (DTensor) the norm is a partial DTensor, not yet
        reduced across ranks (see :func:`total_norm` and :func:`norm_shard`).
        """
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grads = [p.grad for p in _unique(self.model.parameters()) if p.grad is not None]
        return total_norm(grads)

    def optimizer_step(
        self, max_grad_norm: float | None = None, grad_norm: float | None = None
    ) -> StepInfo:
        """Clip to ``max_grad_norm`` with the whole model's ``grad_norm`` (reduced), then step.

        The trainer records the norm and whether it clipped; an engine that
        computes the norm inside its own step (DeepSpeed) reports both in StepInfo.
        """
        if max_grad_norm is not None and grad_norm is not None:
            params = [p for p in _unique(self.model.parameters()) if p.grad is not None]
            clip_grads(params, max_grad_norm, grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            scale = self.scaler.get_scale()
            self.scaler.update()
            skipped = self.scaler.get_scale() < scale
        else:
            self.optimizer.step()
            skipped = False
        self.zero_grad()
        return StepInfo(skipped=skipped)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def full_model_state(self) -> dict[str, torch.Tensor]:
        """Every parameter and buffer, unsharded, as CPU tensors (call on every rank).

        For comparing strategies and verifying checkpoints; sharded engines
        gather, so all ranks must call it together.
        """
        return cpu_copy(self.model.state_dict())

    def details(self) -> dict:
        """Strategy-specific facts for the result (resolved sync mode, engine config)."""
        return {}

    def rank_metrics(self, warmup_steps: int) -> dict:
        """Numbers this engine measured on this rank over the measured steps, for the result.

        Called once per trial after the steps; the first ``warmup_steps`` of
        them were warmup. JSON-serialisable; a pipeline reports its bubble here.
        """
        return {}

    def model_state_bytes(self) -> ModelStateBytes:
        """Exact bytes of parameters, gradients and optimizer state on this rank."""
        params = list(_unique(self.model.parameters()))
        grads = list(_unique(p.grad for p in params))
        state = [
            value
            for entry in self.optimizer.state.values()
            for value in entry.values()
            if isinstance(value, torch.Tensor)
        ]
        return ModelStateBytes(
            parameters=sum(local_bytes(p) for p in params),
            gradients=sum(local_bytes(g) for g in grads),
            optimizer_state=sum(local_bytes(t) for t in _unique(state)),
        )
