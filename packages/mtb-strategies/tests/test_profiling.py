"""2-rank gloo profiles of the real strategies: their collectives in the trace summary."""

import pytest
from conftest import launch

pytestmark = pytest.mark.timeout(420)

PROFILE = ["--profiler", "torch", "--profile-active", "2", "--no-profile-baseline"]
COLLECTIVES = {
    "ddp": {"gloo:all_reduce"},
    "fsdp": {"gloo:all_gather", "c10d::_allgather_base_"},
    # tensor parallel: DTensor's functional collectives on the tp group
    "nd": {"_c10d_functional::all_reduce", "_c10d_functional::all_gather_into_tensor"},
}
LAYOUTS = {"nd": ["--tp", "2"]}


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "nd"])
def test_two_rank_profile_measures_the_strategys_collectives(tmp_path, strategy):
    done, result, _ = launch(strategy, tmp_path, *PROFILE, *LAYOUTS.get(strategy, []))
    assert done.returncode == 0, done.stderr
    profile = result["profile"]
    assert result["kind"] == "profile" and profile["strategy"] == strategy
    assert profile["traces"] == ["rank_00000.trace.json.gz", "rank_00001.trace.json.gz"]
    names = {op["name"] for op in profile["comm_ops"]}
    assert COLLECTIVES[strategy] <= names
    assert profile["overlap"]["status"] == "measured"
    assert 0 <= profile["overlap"]["ratio"] <= 1
    assert profile["straggler"]["status"] == "measured"
    assert profile["straggler"]["slowest_rank"] in (0, 1)
    assert all(ms > 0 for ms in profile["collective_ms_per_rank"])
