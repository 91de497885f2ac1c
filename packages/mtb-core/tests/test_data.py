"""Synthetic batches depend only on (seed, global step, micro-step, dp rank)."""

import torch

from mtb.data import SyntheticTokens, sample_seed


def source(**overrides) -> SyntheticTokens:
    args = {"vocab_size": 97, "seq_len": 16, "micro_batch_size": 4, "seed": 7, "dp_rank": 0}
    return SyntheticTokens(**{**args, **overrides})


def test_same_coordinates_give_identical_batches_whatever_came_before():
    first = source().batch(step=5, micro_step=1)
    other = source()
    for step in range(5):  # a different history must not change step 5
        other.batch(step, 0)
    again = other.batch(step=5, micro_step=1)
    assert torch.equal(first.inputs, again.inputs)
    assert torch.equal(first.targets, again.targets)


def test_each_coordinate_changes_the_batch():
    ref = source().batch(3, 0).inputs
    assert not torch.equal(ref, source().batch(4, 0).inputs)
    assert not torch.equal(ref, source().batch(3, 1).inputs)
    assert not torch.equal(ref, source(dp_rank=1).batch(3, 0).inputs)
    assert not torch.equal(ref, source(seed=8).batch(3, 0).inputs)


def test_global_state_does_not_leak_in():
    torch.manual_seed(0)
    a = source().batch(2, 0).inputs
    torch.manual_seed(123)
    torch.rand(10)
    assert torch.equal(a, source().batch(2, 0).inputs)


def test_batch_shape_and_targets_are_shifted_inputs():
    batch = source().batch(0, 0)
    assert batch.inputs.shape == batch.targets.shape == (4, 16)
    assert batch.inputs.dtype == torch.int64
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    assert int(batch.inputs.max()) < 97 and batch.tokens == 64


def test_seed_mixing_separates_nearby_coordinates():
    seeds = {sample_seed(seed, s, i) for seed in range(3) for s in range(20) for i in range(16)}
    assert len(seeds) == 3 * 20 * 16
    assert all(0 <= s < 2**63 for s in seeds)


def test_global_batch_is_the_same_however_it_is_split():
    """single 4B == 2 ranks x 2B == 2 ranks x 2 micro-batches x B, sequence for sequence."""
    whole = source(micro_batch_size=4).batch(3, 0).inputs
    ranks = [
        source(micro_batch_size=2, dp_rank=r, dp_world_size=2).batch(3, 0).inputs for r in range(2)
    ]
    assert torch.equal(torch.cat(ranks), whole)
    accumulated = [
        source(micro_batch_size=1, dp_rank=r, dp_world_size=2).batch(3, m).inputs
        for m in range(2)
        for r in range(2)
    ]
    assert torch.equal(torch.cat(accumulated), whole)
