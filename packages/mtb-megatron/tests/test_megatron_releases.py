"""Steady-state time, throughput, counters and memory read by each release's rules.

Iteration 1 takes 5000 ms, every other 800 ms, 12 iterations are skipped
(iteration 1 among them, as fp16 loss scaling does): the true steady state
is 800 ms/iter, 80.0 TFLOP/s/GPU and 12 skipped iterations, on both releases.
"""

import pytest
from megatron_log import iteration_line, memory_line, training_log

from mtb_megatron import intervals, logparse, runner

SKIPPED = set(range(1, 13))


def step_ms(iteration):
    return 5000.0 if iteration == 1 else 800.0


@pytest.mark.parametrize("release", ["0.18", "0.16", "0.13"])
def test_steady_state_and_counters_follow_the_release(release):
    lines = training_log(release, step_ms, skipped_iters=SKIPPED)
    records = logparse.parse_log("\n".join(lines))
    version = {"0.18": "0.18.2", "0.16": "0.16.1", "0.13": "0.13.0"}[release]
    repeated = intervals.first_line_repeated(version)
    metrics = runner.metrics(records, repeated)
    assert [r["iteration"] for r in records][:2] == ([10, 20] if release == "0.13" else [1, 10])
    assert metrics["elapsed_ms_per_iteration"]["mean"] == 800.0
    assert metrics["elapsed_ms_per_iteration"]["max"] == 800.0
    assert metrics["throughput_tflops_per_gpu"]["mean"] == 80.0
    assert (metrics["skipped_iterations"], metrics["nan_iterations"]) == (12, 0)
    assert metrics["measured_log_lines"] == 4 and metrics["first_iteration_line"] is repeated


def test_v0_16_lines_read_the_old_way_give_the_wrong_figures_of_issue_18():
    records = logparse.parse_log("\n".join(training_log("0.16", step_ms, SKIPPED)))
    old = runner.metrics(records, first_line_repeated=False)
    assert old["elapsed_ms_per_iteration"]["mean"] == 884.0
    assert old["throughput_tflops_per_gpu"]["mean"] == 74.5
    assert old["skipped_iterations"] == 13


def test_a_nan_iteration_in_the_first_line_is_counted_once_on_v0_16():
    records = logparse.parse_log("\n".join(training_log("0.16", step_ms, nan_iters={1, 30})))
    assert runner.metrics(records, True)["nan_iterations"] == 2
    assert runner.metrics(records[:1], True)["nan_iterations"] == 1


def test_short_runs_fall_back_to_the_last_line():
    records = logparse.parse_log("\n".join(training_log("0.16", step_ms, train_iters=10)))
    metrics = runner.metrics(records, True)
    assert [r["iteration"] for r in records] == [1, 10]
    # iterations 1..10 in one window: start-up included, the best there is
    assert metrics["elapsed_ms_per_iteration"]["mean"] == 1220.0
    assert metrics["measured_log_lines"] == 1


@pytest.mark.parametrize(
    ("version", "repeated"),
    [("0.13.0", False), ("0.13.2", False), ("0.15.3", False), ("0.16.0rc0", True),
     ("0.16.0", True), ("0.16.1", True), ("0.18.2", True), ("1.0.0", True)],
)  # fmt: skip
def test_which_releases_print_the_first_iteration(version, repeated):
    assert intervals.first_line_repeated(version) is repeated


def test_an_iteration_line_of_each_release_parses():
    for release in ("0.18", "0.16", "0.13"):
        line = iteration_line(release, 20, 100, 812.3, 1, 0)
        record = logparse.parse_line(line)
        assert (record["iteration"], record["elapsed_ms_per_iteration"]) == (20, 812.3)
        assert (record["loss_scale"], record["skipped_iterations"]) == (65536.0, 1)


@pytest.mark.parametrize("release", ["0.18", "0.16", "0.13"])
def test_memory_lines_give_each_ranks_peak(release):
    text = "\n".join(
        [
            memory_line(release, 0, 1, 1000.5, 2100.25, 3000.0, 3000.0),
            iteration_line(release, 2, 4, 800.0, 0, 0),
            memory_line(release, 2, 1, 900.0, 1900.125, 2048.0, 2048.0),
            memory_line(release, 0, 2, 1000.5, 2200.75, 3000.0, 3072.0),
        ]
    )
    reports = logparse.parse_memory(text)
    assert reports[0] == {
        "rank": 0,
        "label": "after 1 iterations",
        "allocated_mb": 1000.5,
        "max_allocated_mb": 2100.25,
        "reserved_mb": 3000.0,
        "max_reserved_mb": 3000.0,
    }
    peaks = runner.memory_by_rank(reports)
    assert peaks == [
        {"rank": 0, "max_allocated_mb": 2200.75, "max_reserved_mb": 3072.0},
        {"rank": 2, "max_allocated_mb": 1900.125 if release == "0.13" else 1900.12,
         "max_reserved_mb": 2048.0},
    ]  # fmt: skip
