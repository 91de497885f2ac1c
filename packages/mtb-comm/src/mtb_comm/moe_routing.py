"""Softmax top-k gating with a capacity per expert, as in Switch Transformer and GShard.

Capacity counts routed assignments (tokens x k), as Megatron-LM does:
capacity = ceil(capacity_factor x tokens x k / experts); for top-1 that is
capacity_factor x tokens / experts. Slots are filled first choices first,
then by token order, so a token loses its second choice before anyone loses
a first; assignments past an expert's capacity are dropped and counted.
Gate weights: the top-1 probability (Switch), the two top probabilities
renormalised (GShard).
"""

import math

import attrs


@attrs.define
class Routing:
    """Where each of T tokens goes: ``experts``, ``gates``, ``kept`` are [T, k]."""

    experts: object
    gates: object
    kept: object
    capacity: int
    probs: object  # [T, E] router probabilities

    @property
    def num_experts(self) -> int:
        return self.probs.shape[1]

    def assigned_per_expert(self) -> list[int]:
        """Assignments each expert was chosen for, before capacity."""
        return self._count(self.experts.flatten())

    def kept_per_expert(self) -> list[int]:
        return self._count(self.experts[self.kept])

    def _count(self, experts) -> list[int]:
        import torch

        return torch.bincount(experts, minlength=self.num_experts).tolist()

    @property
    def dropped(self) -> int:
        return int((~self.kept).sum().item())


def capacity(tokens: int, experts: int, factor: float, top_k: int = 1) -> int:
    return math.ceil(factor * tokens * top_k / experts)


def route(logits, top_k: int, capacity_factor: float) -> Routing:
    """Gate ``logits`` [T, E] to ``top_k`` experts with capacity ``capacity_factor``."""
    import torch

    tokens, experts = logits.shape
    probs = torch.softmax(logits.float(), dim=-1)
    top_probs, chosen = probs.topk(top_k, dim=-1)
    gates = top_probs if top_k == 1 else top_probs / top_probs.sum(-1, keepdim=True)
    limit = capacity(tokens, experts, capacity_factor, top_k)
    # choice-major order: every first choice before any second choice
    one_hot = torch.nn.functional.one_hot(chosen.t().reshape(-1), experts)
    slot = (one_hot.cumsum(0) * one_hot).sum(-1) - 1
    kept = (slot < limit).reshape(top_k, tokens).t()
    return Routing(chosen, gates, kept, limit, probs)


def imbalance(per_expert: list[int]) -> float:
    """max / mean of the loads (1.0 is perfect balance)."""
    mean = sum(per_expert) / len(per_expert)
    return max(per_expert) / mean if mean else 0.0


def load_balancing_loss(routing: Routing) -> float:
    """Switch Transformer's auxiliary loss: E x sum_e f_e x P_e (1.0 when uniform).

    f_e is the fraction of assignments routed to expert e (before capacity),
    P_e the mean router probability of expert e.
    """
    import torch

    assigned = torch.tensor(routing.assigned_per_expert(), dtype=torch.float64)
    fraction = assigned / assigned.sum()
    mean_prob = routing.probs.double().mean(0)
    return float(routing.num_experts * (fraction * mean_prob).sum())


def router_logits(tokens: int, experts: int, seed: int, skew: float = 1.0):
    """Seeded router-like logits: noise plus a Zipf-like preference for low expert ids."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    noise = torch.randn(tokens, experts, generator=generator)
    bias = -skew * torch.log1p(torch.arange(experts, dtype=torch.float32))
    return noise + bias


def uneven_splits(count: int, world: int, seed: int, tokens: int = 1024) -> list[list[int]]:
    """``splits[src][dst]`` for an uneven all_to_all: each row routes ``count`` elements.

    Every source routes ``tokens`` tokens top-1 over one expert per rank with
    its own seed; elements follow the token shares, the rounding remainder
    goes to the busiest destination.
    """
    rows = []
    for src in range(world):
        routing = route(router_logits(tokens, world, seed + src), 1, capacity_factor=world)
        shares = routing.assigned_per_expert()
        row = [count * share // tokens for share in shares]
        row[shares.index(max(shares))] += count - sum(row)
        rows.append(row)
    return rows
