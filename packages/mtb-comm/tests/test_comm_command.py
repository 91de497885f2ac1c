"""``mtb comm`` on 2 gloo ranks: every operation and placement checked, numbers consistent."""

import json
import os
import subprocess
import sys

import pytest
from conftest import run_mtb

from mtb_comm.bandwidth import bus_factor
from mtb_comm.results import from_dict

SIZES = [1024, 64 * 1024]


@pytest.fixture(scope="session")
def comm(session_dir):
    args = ["comm", "--sizes", "1K,64K", "--warmup", "1", "--iters", "3", "--dtype", "bfloat16"]
    return run_mtb(session_dir, "comm", *args)


def test_exits_0_with_an_ok_document(comm):
    done, doc = comm
    assert done.returncode == 0, done.stderr
    assert (doc["kind"], doc["status"], doc["error"]) == ("comm", "ok", None)
    assert doc["schema_version"] == 1 and doc["provenance"]["torch"]
    (node,) = doc["provenance"]["nodes"]  # one node, from its local rank 0
    assert (node["node_rank"], node["first_rank"]) == (0, 0) and node["torch"]
    assert "nodes" not in doc["environment"]
    assert doc["environment"]["world_size"] == 2 and doc["environment"]["backend"] == "gloo"
    assert doc["group_size"] == 2  # one group of every rank
    assert any(p["distribution"] == "mtb-comm" for p in doc["plugins"])
    assert "mtb comm: 2 ranks, cpu / gloo, bfloat16" in done.stdout
    assert from_dict(doc).measurements[0].operation == "all_reduce"


def test_every_case_is_measured_and_every_element_checked(comm):
    _, doc = comm
    cases = [(m["operation"], m["placement"], m["mode"]) for m in doc["measurements"]]
    expected = [
        ("all_reduce", "in_place", None),
        ("all_gather", "out_of_place", None),
        ("all_gather", "in_place", None),
        ("reduce_scatter", "out_of_place", None),
        ("reduce_scatter", "in_place", None),
        ("broadcast", "in_place", None),
        ("all_to_all", "out_of_place", "equal"),
        ("all_to_all", "out_of_place", "uneven"),
    ]
    assert cases == [case for case in expected for _ in SIZES]
    for m in doc["measurements"]:
        assert m["status"] == "ok" and m["wrong_elements"] == 0
        received = m["elements"] // 2 if m["operation"] == "reduce_scatter" else m["elements"]
        if m["mode"] != "uneven":
            assert m["checked_elements"] == 2 * received, m


def test_bytes_times_and_bandwidths_follow_nccl_tests(comm):
    _, doc = comm
    for m, size in zip(doc["measurements"], SIZES * 8, strict=True):
        assert m["bytes"] == size and m["elements"] == size // 2  # bfloat16
        assert m["time_us"] == max(m["per_rank_time_us"])
        assert m["time_avg_us"] == pytest.approx(sum(m["per_rank_time_us"]) / 2)
        assert m["time_min_us"] <= m["time_p50_us"] <= m["time_max_us"]
        assert m["algbw_gbps"] == pytest.approx(size / (m["time_us"] * 1e-6) / 1e9)
        assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"] * bus_factor(m["operation"], 2))
        assert m["per_rank_time_us"][m["slowest_rank"]] == m["time_us"]


def test_uneven_all_to_all_splits_sum_on_both_sides(comm):
    _, doc = comm
    for m in doc["measurements"]:
        if m["operation"] != "all_to_all":
            continue
        splits = m["splits"]
        assert [sum(row) for row in splits] == [m["elements"]] * 2  # each rank sends it all
        received = [splits[0][dst] + splits[1][dst] for dst in range(2)]
        assert sum(received) == 2 * m["elements"]
        assert m["checked_elements"] == sum(received)  # each output held what it received
        assert m["imbalance"] == pytest.approx(max(received) / (sum(received) / 2))
        if m["mode"] == "uneven":
            assert m["imbalance"] > 1.1
        else:
            assert m["imbalance"] == 1.0


def test_a_size_that_cannot_be_measured_exactly_is_announced(tmp_path):
    args = ["comm", "--operations", "all_reduce,all_gather", "--sizes", "3"]
    done, doc = run_mtb(tmp_path, "comm", *args, "--warmup", "0", "--iters", "1")
    assert done.returncode == 0, done.stderr
    assert "mtb comm: size 3 B is measured as 4 B for all_reduce and as 8 B for all_gather" in (
        done.stderr
    )
    assert {m["operation"]: m["bytes"] for m in doc["measurements"]} == {
        "all_reduce": 4,
        "all_gather": 8,
    }


@pytest.mark.timeout(150)
def test_four_ranks_in_groups_of_two_run_every_case_at_once_and_check_it(tmp_path):
    """Two groups of two consecutive ranks, each running every collective at the same
    time: every element is right within its group, and the bus factor is the group's."""
    operations = "all_reduce,all_gather,reduce_scatter,broadcast,all_to_all,send_recv"
    args = ["comm", "--sizes", "1K", "--warmup", "1", "--iters", "2", "--group-size", "2"]
    done, doc = run_mtb(tmp_path, "groups", *args, "--operations", operations, nproc=4)
    assert done.returncode == 0, done.stderr
    assert doc["config"]["group_size"] == doc["group_size"] == 2
    assert doc["environment"]["world_size"] == 4
    assert "mtb comm: 4 ranks in groups of 2 at once, cpu / gloo" in done.stdout
    assert {m["operation"] for m in doc["measurements"]} == set(operations.split(","))
    for m in doc["measurements"]:
        assert m["status"] == "ok" and m["wrong_elements"] == 0, m
        assert len(m["per_rank_time_us"]) == 4
        received = m["elements"] // 2 if m["operation"] == "reduce_scatter" else m["elements"]
        if m["mode"] != "uneven":
            assert m["checked_elements"] == 4 * received, m
        assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"] * bus_factor(m["operation"], 2))


@pytest.mark.timeout(150)
def test_under_torchrun_the_group_is_every_rank_it_started(tmp_path):
    """torchrun starts the ranks, not mtb's flags: the group and the bus factor come from
    the ranks running."""
    out = tmp_path / "torchrun.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    command += ["-m", "mtb", "comm", "--sizes", "1K", "--warmup", "1", "--iters", "2"]
    command += ["--operations", "all_reduce", "--device", "cpu", "--output", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=140)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["group_size"] == 2 and doc["environment"]["world_size"] == 2
    (m,) = doc["measurements"]
    assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"] * bus_factor("all_reduce", 2))
