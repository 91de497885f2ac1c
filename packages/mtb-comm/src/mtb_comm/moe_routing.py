"""Routing for ``mtb moe route``: the router of the MoE model in mtb-core, one implementation.

``route``, ``capacity``, ``imbalance`` and the load-balancing loss are
:mod:`mtb.moe`'s (see it for capacity, drop order and gates); this module adds
the seeded router-like logits and uneven splits the benchmarks route.
"""


def capacity(tokens: int, experts: int, factor: float, top_k: int = 1) -> int:
    from mtb.api import moe

    return moe.capacity(tokens, experts, factor, top_k)


def route(logits, top_k: int, capacity_factor: float):
    """Gate ``logits`` [T, E] to ``top_k`` experts with capacity ``capacity_factor``."""
    from mtb.api import moe

    return moe.route(logits, top_k, capacity_factor)


def imbalance(per_expert: list[int]) -> float:
    """max / mean of the loads (1.0 is perfect balance)."""
    from mtb.api import moe

    return moe.imbalance(per_expert)


def load_balancing_loss(routing) -> float:
    """The model's auxiliary loss of ``routing`` as a number (1.0 when uniform)."""
    from mtb.api import moe

    return float(moe.load_balancing_loss(routing))


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
