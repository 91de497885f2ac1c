"""``mtb run --strategy example-localsgd`` with the plugin registered only in the test.

The ``mtb_plugin`` fixture (mtb.testing) registers the plugin module in a
fresh plugin manager and makes launched workers load it too, so the same
test covers one rank and two without installing anything.
"""

import math

import pytest

TINY = ["--strategy", "example-localsgd", "--preset", "tiny", "--steps", "3", "--warmup-steps", "1"]


@pytest.mark.parametrize("ranks", [1, 2])
def test_localsgd_trains_on_one_and_two_ranks(mtb_plugin, ranks):
    run = mtb_plugin("mtb_example_strategy.plugin").run(*TINY, nproc_per_node=ranks)
    assert run.exit_code == 0, run.output
    document = run.document
    assert document["status"] == "ok"
    assert document["environment"]["world_size"] == ranks
    assert document["components"]["strategy"]["plugin"] == "mtb_example_strategy.plugin"
    trial = document["trials"][0]
    assert [r["rank"] for r in trial["per_rank"]] == list(range(ranks))
    assert all(math.isfinite(step["loss"]) for step in trial["steps"])


def test_its_option_and_its_counted_syncs_reach_the_result(mtb_plugin):
    """--localsgd-sync-every (the plugin's own option) and mtb.api's SyncCounter: on two
    ranks a step that averaged the replicas records 1 synchronisation, the others 0."""
    plugin = mtb_plugin("mtb_example_strategy.plugin")
    default = plugin.run(*TINY, nproc_per_node=2)
    every = plugin.run(*TINY, "--localsgd-sync-every", "1", nproc_per_node=2)
    for run in (default, every):
        assert run.exit_code == 0, run.output
    syncs = [
        [s["gradient_syncs"] for s in r.document["trials"][0]["steps"]] for r in (default, every)
    ]
    assert syncs == [[1, 0], [1, 1]]  # measured steps 1 and 2: every 2nd step, then every step
    assert every.document["config"]["strategy_options"] == {"localsgd_sync_every": 1}
    assert every.document["strategy_details"]["gradient_sync_mode"]["resolved"] == "every 1 steps"
