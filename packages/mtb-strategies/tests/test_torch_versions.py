"""torch 2.11, the lower bound, next to the pinned 2.13: the APIs that differ between them.

torch 2.13 added ``dist.reduce_scatter_single`` (and deprecated
``reduce_scatter_tensor`` for it); 2.11 has only ``reduce_scatter_tensor``.
Every other torch API mtb calls has the same signature in both (checked
against both releases' sources; see docs/quickstart.md). The tests here
remove the newer function, as 2.11 lacks it, and run the path for real on
a one-rank gloo group.
"""

import pytest
import torch
import torch.distributed as dist

from mtb.api import SyncCounter
from mtb_strategies.fsdp_engine import CountingReduceScatter

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("release", ["2.13", "2.11"])
def test_fsdp_counted_reduce_scatter_runs_on_both_releases(monkeypatch, one_rank_group, release):
    if release == "2.11":
        monkeypatch.delattr(dist, "reduce_scatter_single", raising=False)
    counter = SyncCounter()
    source, out = torch.arange(4.0), torch.empty(4)
    CountingReduceScatter(counter)(out, source, one_rank_group, dist.ReduceOp.SUM)
    assert torch.equal(out, source)
    assert counter.calls == 1
