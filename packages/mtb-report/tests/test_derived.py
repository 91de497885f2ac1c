"""Scaling efficiency and the comparison against ddp, on hand-made records."""

from mtb_report.tables import against_ddp, scaling_efficiency


def record(strategy, world_size, tokens_per_s, peak=100, step_ms=10.0):
    return {
        "strategy": strategy,
        "world_size": world_size,
        "tokens_per_s": tokens_per_s,
        "peak_memory_bytes": peak,
        "step_ms": step_ms,
        "strategy_options": {},
        "gradient_sync_requested": "auto",
        "gradient_sync_mode": "last",
    }


def test_scaling_efficiency_is_per_device_throughput_against_the_smallest_world():
    one, four = record("ddp", 1, 1000.0), record("ddp", 4, 3000.0)
    other = record("fsdp", 2, 10.0)
    assert scaling_efficiency(four, [one, four, other]) == 0.75
    assert scaling_efficiency(one, [one, four, other]) is None
    assert scaling_efficiency(other, [one, four, other]) is None


def test_memory_and_step_time_are_relative_to_ddp_at_the_same_world_size():
    ddp, fsdp = record("ddp", 2, 1.0, peak=200, step_ms=10.0), record("fsdp", 2, 1.0, peak=150)
    fsdp["step_ms"] = 12.0
    records = [ddp, fsdp, record("ddp", 4, 1.0, peak=1)]
    assert against_ddp(fsdp, records, "peak_memory_bytes") == -0.25
    assert abs(against_ddp(fsdp, records, "step_ms") - 0.2) < 1e-12
    assert against_ddp(ddp, records, "step_ms") is None


def test_no_ddp_reference_when_several_ddp_runs_could_be_it():
    fsdp = record("fsdp", 2, 1.0, peak=150)
    plain, tuned = record("ddp", 2, 1.0, peak=200), record("ddp", 2, 1.0, peak=100)
    tuned["strategy_options"] = {"bucket_cap_mb": 1}
    assert against_ddp(fsdp, [plain, tuned, fsdp], "peak_memory_bytes") == -0.25
    other = record("ddp", 2, 1.0, peak=300)
    assert against_ddp(fsdp, [plain, other, fsdp], "peak_memory_bytes") is None
