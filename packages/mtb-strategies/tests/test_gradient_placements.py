"""Gradients take their parameters' placements under tensor parallelism (one process).

torch leaves two gradients placed otherwise than their weights: a
vocabulary-split embedding's comes back whole on every tp rank, a
sequence-parallel norm's partial. A rank that kept them so would hold (and
count) the whole embedding's gradient. A fake process group of 2 ranks in
this one process gives the DTensors their 2-rank shapes without a launch.
"""

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import RowwiseParallel, SequenceParallel, parallelize_module
from torch.testing._internal.distributed.fake_pg import FakeStore

from mtb_strategies.tensor_parallel import place_grads_like_params

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def tp_mesh():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield init_device_mesh("cpu", (2,))
    finally:
        dist.destroy_process_group()


def test_embedding_and_norm_gradients_take_their_weights_placements(tp_mesh):
    model = nn.ModuleDict({"emb": nn.Embedding(256, 32), "norm": nn.LayerNorm(32)})
    parallelize_module(model["emb"], tp_mesh, RowwiseParallel(input_layouts=Replicate()))
    parallelize_module(model["norm"], tp_mesh, SequenceParallel())
    hidden = model["emb"](torch.randint(0, 256, (2, 8)))
    model["norm"](hidden).sum().backward()
    embedding, norm = model["emb"].weight, model["norm"].weight
    assert embedding.grad.placements == (Replicate(),)  # torch's: the whole vocabulary
    assert norm.grad.placements[0].is_partial()

    place_grads_like_params(model)

    assert embedding.grad.placements == (Shard(0),)
    assert embedding.grad.to_local().shape == (128, 32)  # this rank's rows only
    assert norm.grad.placements == (Replicate(),)
