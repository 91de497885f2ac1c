"""Gating, capacity boundaries, drops, imbalance and the load-balancing loss, in process."""

import pytest
import torch

from mtb_comm import moe_routing
from mtb_comm.moe_routing import capacity, imbalance, load_balancing_loss, route


def logits_for(experts: list[int], num_experts: int = 4):
    """Logits that send token i to ``experts[i]`` with a clear margin."""
    out = torch.zeros(len(experts), num_experts)
    out[torch.arange(len(experts)), torch.tensor(experts)] = 5.0
    return out


def test_capacity_is_factor_times_assignments_over_experts_rounded_up():
    assert capacity(8, 4, 1.0) == 2
    assert capacity(8, 4, 1.25) == 3  # 2.5 -> 3
    assert capacity(8, 4, 1.0, top_k=2) == 4
    assert capacity(10, 4, 1.0) == 3


@pytest.mark.parametrize(("to_expert_0", "dropped"), [(1, 0), (2, 0), (3, 1), (5, 3)])
def test_drops_at_the_capacity_boundary(to_expert_0, dropped):
    # 8 tokens, 4 experts, factor 1: capacity 2; the rest spread under capacity
    rest = [1, 1, 2, 2, 3, 3, 3][: 8 - to_expert_0]
    routing = route(logits_for([0] * to_expert_0 + rest), 1, 1.0)
    assert routing.capacity == 2
    assert routing.dropped == dropped + max(0, rest.count(3) - 2)
    assert routing.kept_per_expert()[0] == min(to_expert_0, 2)
    assert sum(routing.assigned_per_expert()) == 8
    assert sum(routing.kept_per_expert()) == 8 - routing.dropped


def test_later_tokens_are_dropped_first():
    routing = route(logits_for([0, 0, 0, 1]), 1, 1.0)  # capacity 1
    assert routing.kept.flatten().tolist() == [True, False, False, True]


def test_top2_first_choices_take_slots_before_second_choices():
    # token 0 prefers 1 then 0; tokens 1, 2 prefer 0 then 1; capacity ceil(1.0 * 3 * 2 / 2) = 3
    logits = torch.tensor([[4.0, 5.0], [5.0, 4.0], [5.0, 4.0]])
    routing = route(logits, 2, 1.0)
    assert routing.capacity == 3
    assert routing.experts.tolist() == [[1, 0], [0, 1], [0, 1]]
    assert routing.dropped == 0
    # capacity 1 per expert: firsts win (token 0 -> 1, token 1 -> 0), every second choice dropped
    routing = route(logits, 2, 1 / 3)
    assert routing.capacity == 1
    assert routing.kept.tolist() == [[True, False], [True, False], [False, False]]
    assert routing.gates.sum(-1).tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_top1_gate_is_the_router_probability():
    logits = torch.tensor([[1.0, 0.0]])
    routing = route(logits, 1, 1.0)
    assert routing.gates.item() == pytest.approx(torch.softmax(logits, -1)[0, 0].item())


def test_imbalance_and_loss_are_one_when_uniform():
    assert imbalance([3, 3, 3]) == 1.0
    assert imbalance([6, 2, 1, 3]) == 2.0  # max 6 / mean 3
    uniform = route(torch.zeros(4, 4) + torch.eye(4) * 1e-3, 1, 1.0)
    assert load_balancing_loss(uniform) == pytest.approx(1.0, abs=1e-3)
    # every token to expert 0 with probability ~1: E x 1 x 1 = 4
    collapsed = route(logits_for([0] * 8) * 10, 1, 1.0)
    assert load_balancing_loss(collapsed) == pytest.approx(4.0, rel=1e-3)


def test_uneven_splits_are_seeded_router_shares_that_sum_on_both_sides():
    splits = moe_routing.uneven_splits(1000, 4, seed=7)
    assert splits == moe_routing.uneven_splits(1000, 4, seed=7)
    assert [sum(row) for row in splits] == [1000] * 4  # what each rank sends
    received = [sum(row[dst] for row in splits) for dst in range(4)]
    assert sum(received) == 4000  # what the ranks receive, in all
    assert imbalance(received) > 1.2  # skewed like a router, not uniform
