"""Expert parallelism: the experts of every MoE layer sharded over the ep ranks.

The data-parallel ranks form a (dp / ep, ep) mesh: ranks in a row of ep
share the experts between them, E / ep each, as DTensors sharded on the
expert dim (so checkpoints reshard to any ep). Each MoE layer sends every
kept (token, expert) row to the expert's rank with one uneven all_to_all and
brings the results back with a second, both with autograd (the backward
sends the gradients back along the same splits); the counts travel first.
Each all_to_all's bytes and time go to the layer's ``traffic``. Dense
parameters stay with the engine's data parallelism (DDP, FSDP2), which
leaves the experts out.

Gradients: an expert's owner receives the gradients of every ep peer's
tokens through the all_to_all backward, each from that rank's mean loss.
Dividing by dp (and summing over the dp / ep ranks that hold the same
experts) gives the gradient of the global mean loss, as one process has it.
"""

import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.profiler import record_function

from mtb.api import moe, total_norm

EXPERT_WEIGHTS = ("w1", "w2")


def exchange(rows, receive: list[int], send: list[int], group, traffic) -> torch.Tensor:
    """One uneven all_to_all_single of ``rows``, its bytes and time added to ``traffic``."""
    out = rows.new_empty((sum(receive), *rows.shape[1:]))
    started = time.perf_counter()
    with record_function("mtb.moe.all_to_all"):
        dist.all_to_all_single(out, rows.contiguous(), receive, send, group=group)
    if rows.is_cuda:
        torch.cuda.synchronize(rows.device)
    traffic.seconds += time.perf_counter() - started
    traffic.bytes += rows.numel() * rows.element_size()
    return out


class AllToAll(torch.autograd.Function):
    """all_to_all with autograd: the backward sends the gradients back along the same splits."""

    @staticmethod
    def forward(ctx, rows, receive, send, group, traffic):
        ctx.route = (receive, send, group, traffic)
        return exchange(rows, receive, send, group, traffic)

    @staticmethod
    def backward(ctx, grad):
        receive, send, group, traffic = ctx.route
        return exchange(grad, send, receive, group, traffic), None, None, None, None


class AllToAllDispatch:
    """An MoE layer's dispatch over the ep group: send rows, run local experts, combine."""

    def __init__(self, group, ep: int, traffic):
        self.group = group
        self.ep = ep
        self.traffic = traffic

    def splits(self, counts: torch.Tensor) -> tuple[list[int], list[int], torch.Tensor]:
        """Rows to send to and receive from each ep rank, and the received counts per expert."""
        send_counts = counts.view(self.ep, -1)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts.contiguous(), group=self.group)
        return send_counts.sum(1).tolist(), recv_counts.sum(1).tolist(), recv_counts

    def __call__(self, rows, counts, w1, w2):
        send, recv, recv_counts = self.splits(counts)
        with record_function("mtb.moe.dispatch"):
            arrived = AllToAll.apply(rows, recv, send, self.group, self.traffic)
        chunks = recv_counts.flatten().tolist()
        done = moe.run_experts(arrived, chunks, w1.to_local(), w2.to_local())
        with record_function("mtb.moe.combine"):
            return AllToAll.apply(done, send, recv, self.group, self.traffic)


class ExpertParallel:
    """The ep mesh of a run, its expert parameters, and the gradient and norm rules."""

    def __init__(self, context):
        layout, device = context.layout, context.device.type
        self.ep, self.dp = layout.ep, layout.dp
        shape = (self.dp // self.ep, self.ep)
        self.mesh = init_device_mesh(device, shape, mesh_dim_names=("ep_replicate", "ep"))
        self.world_mesh = init_device_mesh(device, (dist.get_world_size(),))
        self.params: list[nn.Parameter] = []

    def shard(self, model) -> list[str]:
        """Keep this rank's experts of every MoE layer; their names, for the engines to skip."""
        rank = self.mesh.get_local_rank("ep")
        names = []
        for layer_name, layer in model.named_modules():
            if not isinstance(layer, moe.MoE):
                continue
            for weight in EXPERT_WEIGHTS:
                local = getattr(layer, weight).detach().chunk(self.ep)[rank].clone()
                placed = DTensor.from_local(local, self.mesh, [Replicate(), Shard(0)])
                param = nn.Parameter(placed)
                setattr(layer, weight, param)
                self.params.append(param)
                names.append(f"{layer_name}.{weight}")
            layer.dispatch = AllToAllDispatch(self.mesh.get_group("ep"), self.ep, layer.traffic)
        return names

    def owns(self, param) -> bool:
        return any(param is own for own in self.params)

    def finish_grads(self) -> None:
        """Expert gradients of the global mean loss: summed over replicas, divided by dp."""
        replicas = self.mesh.get_group("ep_replicate")
        for param in self.params:
            if param.grad is None:
                continue
            local = param.grad.to_local()
            if self.dp > self.ep:
                dist.all_reduce(local, group=replicas)
            local.div_(self.dp)

    def norm(self, dense_norm):
        """The whole model's gradient norm as partial shards over the world (one reduction).

        Each rank contributes its dense part (FSDP's shard, or a 1/world share
        of DDP's replicated norm) and its experts' squares divided by the
        ranks holding the same experts; the trainer's per-step all_reduce
        sums the squares.
        """
        from torch.distributed.tensor._ops._math_ops import _NormPartial

        if isinstance(dense_norm, DTensor) and dense_norm.device_mesh.ndim == 1:
            mesh, dense_sq = dense_norm.device_mesh, dense_norm.to_local().float().square()
        else:  # replicated (DDP), or HSDP's 2-D norm: made whole, a 1/world share each
            whole = dense_norm.full_tensor() if isinstance(dense_norm, DTensor) else dense_norm
            mesh, dense_sq = self.world_mesh, whole.float().square() / dist.get_world_size()
        grads = [p.grad.to_local() for p in self.params if p.grad is not None]
        expert_sq = sum((g.float().square().sum() for g in grads), torch.zeros(()))
        local = (dense_sq + expert_sq.to(dense_sq.device) / (self.dp // self.ep)).sqrt()
        return DTensor.from_local(local, mesh, [_NormPartial(2)], run_check=False)


class ExpertParallelEngine:
    """Mixed into a data-parallel engine: expert gradients, norm, clipping and full state."""

    expert_parallel: ExpertParallel

    def grad_norm(self):
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        self.expert_parallel.finish_grads()
        params = {id(p): p for p in self.model.parameters()}.values()
        dense = [p.grad for p in params if p.grad is not None and not self.expert_parallel.owns(p)]
        return self.expert_parallel.norm(total_norm(dense))

    def optimizer_step(self, max_grad_norm=None, grad_norm=None):
        """Clip every gradient by the whole model's norm, then the engine's own step."""
        if max_grad_norm is not None and grad_norm is not None:
            value = grad_norm.to_local() if isinstance(grad_norm, DTensor) else grad_norm
            coef = min(max_grad_norm / (float(value) + 1e-6), 1.0)
            for param in {id(p): p for p in self.model.parameters()}.values():
                if param.grad is not None:
                    param.grad.mul_(coef)
        return super().optimizer_step(None, None)

    def full_model_state(self) -> dict:
        state = super().full_model_state()
        return {
            name: value.full_tensor() if isinstance(value, DTensor) else value
            for name, value in state.items()
        }
