"""The per-step gradient norm over FSDP shards stays cheap (no timing: the calls it makes).

mtb computes the norm on every step, clipping or not, so its fixed costs are
step overhead: local shards are taken without autograd (``to_local`` with
grad mode on runs an autograd function per gradient) and each layout's
holders are worked out once, not once per gradient. Run on a one-rank gloo
group with a tiny GPT sharded as the fsdp strategy shards it.
"""

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

from mtb import engine
from mtb.api import GPT
from mtb.config import ModelConfig
from mtb.presets import PRESETS

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sharded_grads():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = GPT(ModelConfig(**PRESETS["tiny"]))
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
        tokens = torch.randint(0, 256, (2, 32))
        model(tokens, tokens).backward()
        yield [p.grad for p in model.parameters() if p.grad is not None]
    finally:
        dist.destroy_process_group()


def test_shard_norm_takes_locals_without_autograd_and_holders_once_per_layout(
    monkeypatch, sharded_grads
):
    grad_modes, holders_calls = [], []
    local, holders = engine._local, engine._holders
    monkeypatch.setattr(
        engine, "_local", lambda t: grad_modes.append(torch.is_grad_enabled()) or local(t)
    )
    monkeypatch.setattr(engine, "_holders", lambda g, w: holders_calls.append(g) or holders(g, w))

    norm, sharded = engine.norm_shard(engine.total_norm(sharded_grads))

    layouts = {(g.device_mesh, g.placements) for g in sharded_grads}
    assert len(sharded_grads) > 2 * len(layouts)  # the tiny GPT's grads share few layouts
    assert len(holders_calls) == len(layouts)
    assert grad_modes == [False] * len(sharded_grads)
    assert sharded
    whole = torch.nn.utils.get_total_norm([g.to_local() for g in sharded_grads])
    assert norm.item() == pytest.approx(whole.item(), rel=1e-6)
