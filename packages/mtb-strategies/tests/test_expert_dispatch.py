"""The expert-parallel MoE layer on a 2-rank gloo group against the same layer in one process.

One spawn of two ranks checks top-1 and top-2, with drops and dropless:
outputs, router gradients and each rank's expert-gradient shard equal the
one-process layer on the whole batch; a dispatch with a permuted split
(rows reach the wrong expert) must not.
"""

import json
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mtb.api import moe
from mtb.config import ModelConfig
from mtb_strategies.expert_parallel import AllToAllDispatch, ExpertParallel

pytestmark = pytest.mark.timeout(300)

CASES = {
    "top1-drops": {"moe_top_k": 1, "moe_capacity_factor": 1.0},
    "top1-dropless": {"moe_top_k": 1, "moe_dropless": True},
    "top2-drops": {"moe_top_k": 2, "moe_capacity_factor": 1.0},
    "top2-dropless": {"moe_top_k": 2, "moe_dropless": True},
}
SHAPE = {"vocab_size": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, "seq_len": 8}


class PermutedSplit(AllToAllDispatch):
    """Sends each rank's rows under its experts in reverse order: totals right, experts wrong."""

    def splits(self, counts):
        return super().splits(counts.view(self.ep, -1).flip(1).reshape(-1))


def layer_and_batch(case: str):
    torch.manual_seed(0)
    layer = moe.MoE(ModelConfig(**SHAPE, moe_experts=4, **CASES[case]))
    for weight in (layer.w1, layer.w2):
        torch.nn.init.normal_(weight, std=0.3)
    return layer, torch.randn(4, 8, 16)


def backward(layer, x):
    """Output and mean-square loss (with the router's aux loss) back-propagated."""
    x = x.clone().requires_grad_(True)
    out = layer(x)
    (out.square().mean() + layer.aux_loss).backward()
    return out.detach()


def relative_error(got, want) -> float:
    return float((got - want).abs().max() / want.abs().max())


def check(case: str, rank: int, wrong: bool) -> dict:
    reference, x = layer_and_batch(case)
    expected = backward(reference, x)
    layer, _ = layer_and_batch(case)
    context = SimpleNamespace(layout=SimpleNamespace(ep=2, dp=2), device=torch.device("cpu"))
    experts = ExpertParallel(context)
    experts.shard(torch.nn.ModuleDict({"moe": layer}))
    if wrong:
        layer.dispatch = PermutedSplit(experts.mesh.get_group("ep"), 2, layer.traffic)
    out = backward(layer, x[2 * rank : 2 * rank + 2])
    experts.finish_grads()
    router = layer.router.weight.grad
    dist.all_reduce(router)
    errors = {
        "output": relative_error(out, expected[2 * rank : 2 * rank + 2]),
        "router": relative_error(router / 2, reference.router.weight.grad),
    }
    for name in ("w1", "w2"):
        shard = getattr(reference, name).grad.chunk(2)[rank]
        errors[name] = relative_error(getattr(layer, name).grad.to_local(), shard)
    stats = reference.stats
    return {"errors": errors, "dropped": stats["assigned"] - int(stats["kept"].sum())}


def profiled(rank: int, trace: str) -> dict:
    """One expert-parallel forward and backward under the torch profiler, analysed as mtb does."""
    from torch.profiler import ProfilerActivity, profile

    from mtb.api import analyse_trace, load_trace

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        check("top1-drops", rank, wrong=False)
    profiler.export_chrome_trace(trace)
    summary = analyse_trace(load_trace(trace))
    return {
        "ranges": sorted(summary["ranges_ms"]),
        "comm": [op["name"] for op in summary["comm_ops"]],
    }


def worker(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        found = {case: check(case, rank, wrong=False) for case in CASES}
        found["injected"] = check("top2-dropless", rank, wrong=True)
        found["profile"] = profiled(rank, f"{out}.trace-{rank}.json")
        dist.barrier()
        if rank == 0:
            with open(out, "w") as handle:
                json.dump(found, handle)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def dispatch_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dispatch")
    out = tmp / "errors.json"
    mp.spawn(worker, args=(f"file://{tmp / 'store'}", str(out)), nprocs=2, join=True)
    return json.loads(out.read_text())


@pytest.mark.parametrize("case", list(CASES))
def test_expert_parallel_layer_equals_one_process(dispatch_results, case):
    found = dispatch_results[case]
    assert all(error < 1e-5 for error in found["errors"].values()), found["errors"]
    assert (found["dropped"] > 0) == case.endswith("drops")


def test_a_permuted_split_fails_the_comparison(dispatch_results):
    errors = dispatch_results["injected"]["errors"]
    assert errors["output"] > 1e-2
    assert errors["w1"] > 1e-2


def test_the_profile_names_the_moe_dispatch_and_combine(dispatch_results):
    found = dispatch_results["profile"]
    assert {"moe.dispatch", "moe.combine", "moe.all_to_all"} <= set(found["ranges"])
    assert any("all_to_all" in name or "alltoall" in name for name in found["comm"]), found
