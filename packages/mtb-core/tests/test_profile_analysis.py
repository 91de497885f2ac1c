"""Trace analysis on synthetic timelines with known answers (no profiler, no torch run)."""

import pytest

from mtb.profiling import intervals, trace
from mtb.profiling.summary import combine, overhead

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("compute", "comm", "expected"),
    [
        ([(0, 10)], [(10, 20)], 0.0),  # no overlap: touching ends share no time
        ([(0, 100)], [(10, 20), (30, 40)], 1.0),  # full overlap
        ([(0, 15)], [(10, 20)], 0.5),  # partial overlap
        ([(0, 10), (2, 4), (3, 8)], [(5, 15)], 0.5),  # nested compute counts once
        ([(0, 10)], [(5, 15), (6, 9), (12, 14)], 0.5),  # nested communication too
        ([(0, 4), (6, 10)], [(2, 8)], 4 / 6),  # a gap in compute inside the collective
    ],
)
def test_overlap_is_intersection_over_communication_time(compute, comm, expected):
    assert intervals.overlap_ratio(compute, comm) == pytest.approx(expected)


def test_overlap_without_communication_is_none():
    assert intervals.overlap_ratio([(0, 1)], []) is None


def test_merge_unions_nested_touching_and_unsorted_intervals():
    assert intervals.merge([(5, 6), (0, 3), (1, 2), (3, 4), (7, 7)]) == [(0, 4), (5, 6)]
    assert intervals.length([(0, 10), (2, 3), (9, 12)]) == 12
    assert intervals.intersection([(0, 5), (8, 10)], [(4, 9)]) == [(4, 5), (8, 9)]


def test_spread_names_the_slowest_and_the_ratio_over_the_median():
    stats = intervals.spread([10.0, 10.0, 30.0, 10.0])
    assert (stats["min"], stats["p50"], stats["max"]) == (10.0, 10.0, 30.0)
    assert stats["ratio"] == 3.0 and stats["argmax"] == 2
    assert intervals.spread([5.0, 5.0])["ratio"] == 1.0


def x(name, ts, dur, cat="cpu_op", tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def cuda_like_trace(rank: int, compute_us: float) -> dict:
    """Two 1000 us steps; compute kernels for ``compute_us`` of each, an nccl kernel after.

    Each step: compute kernel [s, s+compute_us), nccl kernel [s+300, s+800); the
    overlap per step is min(compute_us, 800) - 300 of 500 us of communication.
    """
    events = []
    for start in (0.0, 1000.0):
        events += [
            x(f"ProfilerStep#{int(start)}", start, 1000.0, cat="user_annotation"),
            x("mtb.forward", start, 200.0, cat="user_annotation"),
            x("aten::mm", start + 10, 100.0),
            x("aten::addmm", start + 20, 50.0),  # nested in aten::mm
            x("c10d::allreduce_", start + 300, 5.0),
            x("sm90_xmma_gemm_bf16", start, compute_us, cat="kernel", tid=7),
            x("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", start + 300, 500.0, "kernel", 8),
            x("Memcpy HtoD", start + 900, 10.0, cat="gpu_memcpy", tid=7),
            # CUDA traces repeat host ranges on the device: counted once, from the host
            x(f"ProfilerStep#{int(start)}", start + 5, 990.0, cat="gpu_user_annotation", tid=7),
            x("mtb.forward", start + 5, 150.0, cat="gpu_user_annotation", tid=7),
            x("nccl:all_reduce", start + 300, 500.0, cat="gpu_user_annotation", tid=8),
        ]
    return {"distributedInfo": {"rank": rank, "backend": "nccl"}, "traceEvents": events}


def test_cuda_kernels_give_a_device_timeline_with_kernel_times():
    summary = trace.analyse(cuda_like_trace(0, compute_us=550.0))
    assert summary["timeline"] == "device"
    assert summary["steps"] == 2
    assert summary["overlap"] == {"status": "measured", "ratio": 0.5, "reason": None}
    assert summary["comm_ms"] == pytest.approx(1.0)
    assert summary["exposed_comm_ms"] == pytest.approx(0.5)
    assert summary["work_ms"] == pytest.approx([0.75, 0.75])
    device = {row["name"]: row for row in summary["top_device_ops"]}
    assert device["sm90_xmma_gemm_bf16"] == {
        "name": "sm90_xmma_gemm_bf16",
        "count": 2,
        "device_ms": pytest.approx(1.1),
    }
    assert device["Memcpy HtoD"]["device_ms"] == pytest.approx(0.02)
    comm = {row["name"]: row for row in summary["comm_ops"]}
    assert set(comm) == {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "c10d::allreduce_"}
    assert comm["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"]["timeline"] == "device"
    assert comm["c10d::allreduce_"] == {
        "name": "c10d::allreduce_",
        "count": 2,
        "total_ms": pytest.approx(0.01),
        "timeline": "cpu",
    }
    cpu = {row["name"]: row for row in summary["top_cpu_ops"]}
    assert cpu["aten::mm"]["self_cpu_ms"] == pytest.approx(0.1)  # 2 x (100 - 50) us
    assert cpu["aten::mm"]["cpu_total_ms"] == pytest.approx(0.2)
    assert summary["ranges_ms"] == {"forward": pytest.approx(0.4)}


def test_the_rank_that_needs_more_time_of_its_own_is_the_straggler():
    fast, slow = trace.analyse(cuda_like_trace(0, 300.0)), trace.analyse(cuda_like_trace(1, 800.0))
    summary = combine([slow, fast], top=5)
    assert [row["rank"] for row in summary["per_rank"]] == [0, 1]
    # rank 0: 500 us exposed of 1000 -> works 0.5 ms; rank 1: nothing exposed -> 1.0 ms
    assert [row["work_ms"] for row in summary["per_rank"]] == pytest.approx([0.5, 1.0])
    assert summary["straggler"]["slowest_rank"] == 1
    assert summary["straggler"]["ratio"] == pytest.approx(1.0 / 0.75)
    assert summary["step_time_ms"]["ratio"] == 1.0  # the wall step time cannot tell them apart
    assert summary["overlap"]["ratio"] == pytest.approx(0.5)  # (0 + 500) / (500 + 500)
    assert summary["top_device_ops"][0]["ranks"] == 2


def test_a_cpu_trace_measures_gloo_threads_against_the_training_thread():
    events = [
        x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        x("aten::mm", 0, 40),
        x("aten::mm", 60, 20),
        x("c10d::allreduce_", 40, 2),  # issued on the training thread: not compute
        x("gloo:all_reduce", 30, 40, cat="user_annotation", tid=2),
        x("aten::copy_", 30, 40, tid=2),  # work on gloo's thread is not compute either
    ]
    summary = trace.analyse({"traceEvents": events})
    assert summary["timeline"] == "cpu"
    assert summary["overlap"]["ratio"] == pytest.approx(0.5)  # [30,40) and [60,70) of [30,70)
    assert summary["top_device_ops"] == []


def test_an_op_that_encloses_the_collective_it_waits_for_is_not_compute():
    """FSDP's post-backward hook issues the reduce-scatter and waits inside autograd's op."""
    hook = "autograd::engine::evaluate_function: RegisterPostBackwardFunctionBackward"
    events = [
        x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        x(hook, 10, 80),
        x("RegisterPostBackwardFunctionBackward", 11, 78),
        x("aten::div_", 12, 6),  # real work before the collective, on the same thread
        x("c10d::_reduce_scatter_base_", 20, 60),
        x("record_param_comms", 21, 2),
        x("aten::copy_", 24, 3),  # the collective's own copy: communication, not compute
        x("gloo:all_reduce", 21, 58, cat="user_annotation", tid=2),
    ]
    summary = trace.analyse({"traceEvents": events})
    assert summary["overlap"]["ratio"] == 0.0
    assert summary["compute_ms"] == pytest.approx(0.006)  # aten::div_ alone
    assert summary["exposed_comm_ms"] == pytest.approx(0.06)


def test_compute_beside_a_collective_on_gloo_threads_still_overlaps():
    """DDP: the bucket's all-reduce is issued from AccumulateGrad, backward goes on meanwhile."""
    events = [
        x("ProfilerStep#1", 0, 100, cat="user_annotation"),
        x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 10, 20),
        x("c10d::allreduce_", 20, 5),
        x("gloo:all_reduce", 21, 40, cat="user_annotation", tid=2),
        x("aten::mm", 30, 20),  # the next layer's backward, beside the all-reduce
        x("aten::addmm", 55, 5, tid=3),  # another thread's compute beside it
    ]
    summary = trace.analyse({"traceEvents": events})
    # communication [20, 61) = 41 us; compute inside it: [30, 50) and [55, 60)
    assert summary["overlap"]["ratio"] == pytest.approx(25 / 41)


def test_missing_events_make_the_summary_say_undetermined_with_the_reason():
    single = trace.analyse({"traceEvents": [x("ProfilerStep#1", 0, 10, "user_annotation")]})
    assert single["overlap"]["status"] == "undetermined"
    assert "no communication events" in single["overlap"]["reason"]
    no_compute = trace.analyse({"traceEvents": [x("gloo:all_reduce", 0, 5, "user_annotation")]})
    assert "no compute events" in no_compute["overlap"]["reason"]
    summary = combine([no_compute], top=3)
    assert summary["straggler"]["status"] == "undetermined"
    assert "ProfilerStep" in summary["straggler"]["reason"]
    assert summary["top_device_ops"]["status"] == "undetermined"


def test_overhead_compares_the_recorded_steps_with_the_baseline():
    baseline = [[10.0, 10.0, 10.0, 99.0], [11.0, 12.0, 11.0, 99.0]]
    profiled = [[10.0, 13.0, 14.0, 99.0], [10.0, 12.0, 13.0, 99.0]]
    cost = overhead([1, 2], baseline, profiled)
    assert cost["baseline_step_ms_p50"] == pytest.approx(11.5)  # steps' max: 12, 11
    assert cost["profiled_step_ms_p50"] == pytest.approx(13.5)  # 13, 14
    assert cost["overhead_ratio"] == pytest.approx(13.5 / 11.5 - 1)
    assert overhead([1], None, profiled)["status"] == "not measured"
