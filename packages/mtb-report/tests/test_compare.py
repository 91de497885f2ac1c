"""`mtb report compare` as a CI gate: exit 1 only for a regression beyond threshold and noise."""

from report_fixtures import run_document, variant, write


def throughput_changed(factor: float) -> dict:
    """ddp on 2 ranks (2 trials, std about 4%) with its mean tokens/s scaled."""
    summary = run_document("ddp-w2.json")["summary"]["tokens_per_s"]
    return variant(
        "ddp-w2.json", summary__tokens_per_s={**summary, "mean": summary["mean"] * factor}
    )


def gate(invoke, tmp_path, new: dict):
    base = write(tmp_path / "base" / "ddp.json", run_document("ddp-w2.json"))
    return invoke("report", "compare", base, write(tmp_path / "new" / "ddp.json", new))


def verdict_of(output: str, metric: str) -> str:
    line = next(row for row in output.splitlines() if f"| {metric} |" in row)
    return line.strip("| ").split(" | ")[-1]


def test_improvement_exits_0(invoke, tmp_path):
    done = gate(invoke, tmp_path, throughput_changed(1.3))
    assert done.exit_code == 0, done.output
    assert verdict_of(done.output, "tokens_per_s") == "improved"
    assert "+30.0%" in done.output


def test_regression_exits_1(invoke, tmp_path):
    done = gate(invoke, tmp_path, throughput_changed(0.7))
    assert done.exit_code == 1, done.output
    assert verdict_of(done.output, "tokens_per_s") == "regressed"
    assert "1 regression(s)" in done.output


def test_change_past_threshold_but_inside_noise_exits_0(invoke, tmp_path):
    done = gate(invoke, tmp_path, throughput_changed(0.92))
    assert done.exit_code == 0, done.output
    assert verdict_of(done.output, "tokens_per_s") == "within noise"


def test_time_up_is_bad_and_threshold_is_honoured(invoke, tmp_path):
    step = run_document("ddp-w2.json")["summary"]["step_ms"]
    slower = variant("ddp-w2.json", summary__step_ms={**step, "mean": step["mean"] * 1.2})
    assert gate(invoke, tmp_path, slower).exit_code == 1
    base = tmp_path / "base" / "ddp.json"
    loose = invoke("report", "compare", base, tmp_path / "new", "--threshold", "25%")
    assert loose.exit_code == 0, loose.output


def test_a_run_that_now_fails_is_a_regression(invoke, tmp_path):
    failed = variant("ddp-w2.json", status="failed", error="boom")
    done = gate(invoke, tmp_path, failed)
    assert done.exit_code == 1 and "failed: failed" in done.output


def test_unmatched_results_are_named(invoke, tmp_path):
    base = write(tmp_path / "b.json", run_document("ddp-w2.json"))
    new = write(tmp_path / "n.json", run_document("fsdp-w2.json"))
    done = invoke("report", "compare", base, new)
    assert done.exit_code == 0
    assert "only in BASE: ddp x2" in done.output and "only in NEW: fsdp x2" in done.output


def test_bad_threshold_is_a_usage_error(invoke, tmp_path):
    done = invoke("report", "compare", tmp_path, tmp_path, "--threshold", "lots")
    assert done.exit_code == 2 and "percentage" in done.output


def test_an_mfu_above_100_percent_is_marked_in_the_comparison(invoke, tmp_path):
    mfu = run_document("ddp-w2.json")["summary"]["mfu"]
    done = gate(invoke, tmp_path, variant("ddp-w2.json", summary__mfu={**mfu, "mean": 1.013}))
    row = next(line for line in done.output.splitlines() if "| mfu |" in line)
    assert "| 101.30% (above peak!) |" in row
