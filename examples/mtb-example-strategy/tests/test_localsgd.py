"""The Local SGD engine itself: plain training on one process, averaging on two."""

import pytest
import torch

from mtb.api import Engine, RunContext
from mtb.api import resolve_config as resolve
from mtb_example_strategy.engine import LocalSGDEngine, average_parameters, broadcast_parameters
from mtb_example_strategy.plugin import LocalSGDStrategy


def cpu_context(**env) -> RunContext:
    return RunContext(resolve({"preset": "tiny"}), device=torch.device("cpu"), **env)


def make_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def train(engine, steps: int) -> None:
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        inputs = torch.randn(16, 4, generator=generator)
        loss = engine.model(inputs).pow(2).mean()
        engine.backward(loss)
        engine.optimizer_step()


def test_strategy_syncs_every_two_steps_unless_its_option_says_otherwise():
    strategy = LocalSGDStrategy()
    assert strategy.resolve_options({}) == {"localsgd_sync_every": 2}
    assert strategy.resolve_options({"localsgd_sync_every": 4}) == {"localsgd_sync_every": 4}
    assert strategy.unavailable_reason() is None


def test_one_process_without_a_group_is_plain_training():
    plain_model, local_model = make_model(), make_model()
    plain = Engine(plain_model, torch.optim.AdamW(plain_model.parameters(), lr=0.1), cpu_context())
    engine = LocalSGDStrategy().setup(
        local_model, lambda params: torch.optim.AdamW(params, lr=0.1), cpu_context()
    )
    assert isinstance(engine, LocalSGDEngine)
    train(plain, 5)
    train(engine, 5)
    assert engine.local_steps == 5
    assert engine.syncs == 0
    for a, b in zip(plain_model.parameters(), local_model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_sync_every_must_be_positive():
    model = make_model()
    with pytest.raises(ValueError, match="sync_every"):
        LocalSGDEngine(model, torch.optim.SGD(model.parameters(), lr=0.1), cpu_context(), 0)


def _two_rank_worker(rank: int, init_file: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        model = make_model()
        with torch.no_grad():
            for param in model.parameters():
                param.fill_(float(rank + 1))
        broadcast_parameters(model)
        assert all(torch.all(p == 1.0) for p in model.parameters()), "broadcast from rank 0"

        with torch.no_grad():
            for param in model.parameters():
                param.fill_(float(rank + 1))  # rank 0 holds 1, rank 1 holds 2
        assert average_parameters(model) is True
        assert all(torch.all(p == 1.5) for p in model.parameters()), "mean of 1 and 2"

        # lr=0: optimizer steps leave the parameters alone, so only syncs move them.
        with torch.no_grad():
            for param in model.parameters():
                param.fill_(float(rank + 1))
        context = RunContext(
            resolve({"preset": "tiny"}),
            rank=rank,
            world_size=2,
            device=torch.device("cpu"),
            backend="gloo",
        )
        engine = LocalSGDEngine(
            model, torch.optim.SGD(model.parameters(), lr=0.0), context, sync_every=2
        )
        train(engine, 1)
        assert all(torch.all(p == rank + 1) for p in model.parameters()), "no sync at step 1"
        train(engine, 1)
        assert all(torch.all(p == 1.5) for p in model.parameters()), "sync at step 2"
        train(engine, 2)
        assert (engine.local_steps, engine.syncs) == (4, 2)
        # both ranks done before either tears gloo down: one that leaves while its peer is
        # still in a collective aborts it (SIGABRT, "terminate called without an active
        # exception"), which once failed this test in CI
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_two_ranks_average_parameters(tmp_path):
    import torch.multiprocessing as mp

    mp.start_processes(
        _two_rank_worker,
        args=(str(tmp_path / "pg-init"),),
        nprocs=2,
        join=True,
        start_method="spawn",
    )
