"""TP x PP parsing, DP from the world size, and mtb's own rank layout."""

import pytest

from mtb.errors import ConfigError
from mtb_megatron.topology import Topology, all_topologies, layout, parse_topologies
from mtb_megatron.topology_check import compare


def test_parsing_keeps_order_and_drops_repeats():
    assert parse_topologies("1x1, 2x1,2X2,1x1") == [Topology(1, 1), Topology(2, 1), Topology(2, 2)]
    for bad in ("2", "0x1", "ax1", "2x2x2"):
        with pytest.raises(ConfigError, match="is not TPxPP"):
            parse_topologies(bad)


def test_dp_follows_from_the_world_size_or_is_refused():
    assert Topology(2, 2).dp(8) == 2
    with pytest.raises(ConfigError, match="TP x PP = 3 to divide the world size 8"):
        Topology(3, 1).dp(8)
    assert [t.name for t in all_topologies(4)] == ["1x1", "1x2", "1x4", "2x1", "2x2", "4x1"]


def test_layout_of_2x2_on_8_ranks_is_megatrons_default_order():
    groups = [layout(Topology(2, 2), 8, rank) for rank in range(8)]
    assert {tuple(g["tp_group"]) for g in groups} == {(0, 1), (2, 3), (4, 5), (6, 7)}
    assert {tuple(g["pp_group"]) for g in groups} == {(0, 4), (1, 5), (2, 6), (3, 7)}
    assert {tuple(g["dp_group"]) for g in groups} == {(0, 2), (1, 3), (4, 6), (5, 7)}
    assert groups[5] == {
        "tp_rank": 1,
        "dp_rank": 0,
        "pp_rank": 1,
        "tp_group": [4, 5],
        "pp_group": [1, 5],
        "dp_group": [5, 7],
    }


def test_compare_finds_a_rank_whose_groups_differ():
    topology = Topology(2, 1)
    views = [layout(topology, 4, rank) for rank in range(4)]
    assert compare(topology, 4, views)["ok"]
    views[3] = {**views[3], "tp_group": [1, 3]}
    row = compare(topology, 4, views)
    assert (row["ok"], row["mismatches"]) == (False, 1)
    assert row["ranks"][3]["wrong"] == ["tp_group"]


def test_topology_command_exits_1_on_a_mismatch_or_a_failed_rank(cli, tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    import mtb.api
    from mtb.errors import RunFailed
    from mtb_megatron import topology_check

    def wrong_views(launch, function, spec):
        views = [
            [layout(Topology(tp, pp), 2, rank) for tp, pp in spec.topologies] for rank in (0, 1)
        ]
        views[1][0] = {**views[1][0], "dp_group": [1]}
        return views

    def failed_rank(launch, function, spec):
        raise RunFailed("rank 1 failed: RuntimeError: gloo connection refused")

    monkeypatch.setattr(topology_check, "_megatron_core_installed", lambda: True)
    out = tmp_path / "t.json"
    args = ["megatron", "topology", "--world-size", "2", "--output", str(out)]
    for fake, error in (
        (wrong_views, "megatron-core's groups differ from mtb's layout for 1x1"),
        (failed_rank, "rank 1 failed: RuntimeError: gloo connection refused"),
    ):
        monkeypatch.setattr(mtb.api, "run_function", fake)
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, result.output
        assert result.output.strip().splitlines()[-1] == f"Error: {error}"
        doc = json.loads(out.read_text())
        assert (doc["status"], doc["error"]) == ("failed", error)
    assert doc["checks"] == []
