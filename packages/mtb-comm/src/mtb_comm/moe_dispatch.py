"""``mtb moe route`` on one rank: route, dispatch to expert ranks, run experts, combine.

Experts are spread evenly over the ranks (expert e on rank e // experts
per rank). Each rank routes its own tokens with its own capacity, sends
every kept (token, expert) assignment to the expert's rank with one uneven
all_to_all (the counts travel first, as in expert-parallel MoE layers),
the expert ranks apply their experts, and a second all_to_all brings the
rows back to be weighted by their gates and summed per token. The result is
checked against the same routing applied with every expert in this process.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mtb_comm import moe_routing
from mtb_comm.timing import time_iterations, warm_up

ERROR_TOLERANCE = {"float32": 1e-5, "bfloat16": 2e-2}


def make_inputs(config, rank: int, dtype) -> dict:
    """Router and expert weights shared by every rank; tokens of this rank."""
    shared = torch.Generator().manual_seed(config.seed)
    h = config.hidden
    router = torch.randn(config.experts, h, generator=shared) * h**-0.5
    experts = torch.randn(config.experts, h, h, generator=shared) * h**-0.5
    own = torch.Generator().manual_seed(config.seed + 1 + rank)
    tokens = torch.randn(config.tokens, h, generator=own)
    return {"router": router, "experts": experts.to(dtype), "tokens": tokens.to(dtype)}


def apply_experts(rows, expert_ids, experts, first_expert: int = 0):
    """Each row through its expert: gelu(row W_e^T)."""
    out = torch.empty_like(rows)
    for local in expert_ids.unique().tolist():
        mask = expert_ids == local
        out[mask] = F.gelu(rows[mask] @ experts[local - first_expert].t())
    return out


def reference(tokens, routing, experts):
    """The combined output with every expert local: sum of gate x expert(token)."""
    out = torch.zeros_like(tokens, dtype=torch.float32)
    for choice in range(routing.experts.shape[1]):
        kept = routing.kept[:, choice]
        ids = routing.experts[kept, choice]
        rows = apply_experts(tokens[kept], ids, experts).float()
        out[kept] += rows * routing.gates[kept, choice, None]
    return out


def _plan(routing, experts_per_rank: int, world: int) -> dict:
    """Kept assignments sorted by expert (the model's plan): token, gate, expert, rows per rank."""
    from mtb.api import moe

    plan = moe.plan(routing)
    return {
        "token": plan.token,
        "gate": plan.gate,
        "expert": torch.arange(routing.num_experts).repeat_interleave(plan.counts),
        "send": plan.counts.view(world, experts_per_rank).sum(1).tolist(),
    }


def _exchange(values, send: list[int], receive: list[int], device):
    out = torch.empty((sum(receive), *values.shape[1:]), dtype=values.dtype, device=device)
    dist.all_to_all_single(out, values.to(device).contiguous(), receive, send)
    return out


def expert_parallel(context, config, inputs, routing) -> dict:
    """Dispatch, experts, combine; times of the two all_to_alls; the combined output."""
    world, device = context.world_size, context.device
    per_rank = config.experts // world
    plan = _plan(routing, per_rank, world)
    counts = torch.tensor(plan["send"], device=device)
    receive = torch.empty_like(counts)
    dist.all_to_all_single(receive, counts)
    receive = receive.tolist()
    rows = inputs["tokens"][plan["token"]].to(device)
    ids = _exchange(plan["expert"], plan["send"], receive, device)
    local = inputs["experts"][context.rank * per_rank : (context.rank + 1) * per_rank]
    arrived = _exchange(rows, plan["send"], receive, device)
    done = apply_experts(arrived, ids, local.to(device), context.rank * per_rank)
    back = _exchange(done, receive, plan["send"], device)
    times = {
        "dispatch": _timed(context, config, lambda: _exchange(rows, plan["send"], receive, device)),
        "combine": _timed(context, config, lambda: _exchange(done, receive, plan["send"], device)),
    }
    out = torch.zeros(inputs["tokens"].shape, dtype=torch.float32)
    out.index_add_(0, plan["token"], back.cpu().float() * plan["gate"][:, None])
    return {"output": out, "times": times}


def _timed(context, config, step) -> list[float]:
    warm_up(step, config.warmup, context.device)
    dist.barrier()
    return time_iterations(step, config.iters, context.device)


def measure(context, config) -> dict:
    """This rank's routing counts, loss, times and error against the local reference."""
    dtype = getattr(torch, config.dtype)
    inputs = make_inputs(config, context.rank, dtype)
    logits = inputs["tokens"].float() @ inputs["router"].t()
    routing = moe_routing.route(logits, config.top_k, config.capacity_factor)
    result = expert_parallel(context, config, inputs, routing)
    expected = reference(inputs["tokens"], routing, inputs["experts"])
    error = (result["output"] - expected).abs()
    limit = ERROR_TOLERANCE[config.dtype] * max(float(expected.abs().max()), 1.0)
    return {
        "capacity": routing.capacity,
        "assigned": routing.assigned_per_expert(),
        "kept": routing.kept_per_expert(),
        "dropped": routing.dropped,
        "loss": moe_routing.load_balancing_loss(routing),
        "times": result["times"],
        "max_abs_error": float(error.max()),
        "wrong_elements": int((error > limit).sum()),
        "checked_elements": error.numel(),
    }
