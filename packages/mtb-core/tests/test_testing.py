"""mtb.testing's ``mtb_plugin`` fixture: a test's own plugin, on one rank and on two."""

import os

import pytest
from conftest import FIXED_PEAK, PLUGIN_DIR, TINY

SHORT = [*TINY[:2], "--steps", "2", "--warmup-steps", "1", *FIXED_PEAK]


@pytest.fixture
def witness(mtb_plugin, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.setenv("MTB_TEST_WITNESS_DIR", str(tmp_path))
    return mtb_plugin("mtb_test_witness")


def pids(directory) -> dict[int, int]:
    return {int(p.stem[5:]): int(p.read_text()) for p in directory.glob("rank_*.pid")}


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_every_rank_trains_with_the_tests_plugin(witness, tmp_path, ranks):
    run = witness.run("--strategy", "test-witness", *SHORT, nproc_per_node=ranks)
    assert run.exit_code == 0, run.output
    assert run.document["status"] == "ok"
    assert run.document["environment"]["world_size"] == ranks
    strategy = run.document["components"]["strategy"]
    assert (strategy["plugin"], strategy["distribution"]) == ("mtb_test_witness", "unpackaged")
    seen = pids(tmp_path)
    assert sorted(seen) == list(range(ranks))
    assert os.getpid() not in seen.values()  # launched workers loaded the plugin themselves


@pytest.mark.slow
def test_one_rank_of_a_one_process_strategy_trains_in_the_tests_process(witness, tmp_path):
    run = witness.run("--strategy", "single", *SHORT)
    assert run.exit_code == 0, run.output
    assert pids(tmp_path) == {0: os.getpid()}
