"""Rows of equal work: variants (strategy, options, gradient sync) are told apart, scaling
efficiency only across world sizes of otherwise equal runs, mean ± std, and which plots."""

import copy

import pytest
from report_fixtures import run_document, variant

from mtb_report import grouping, plots
from mtb_report.markdown import render_markdown
from mtb_report.records import train_record
from mtb_report.tables import build_report, scaling_efficiency


def with_sync(document: dict, requested: str, resolved: str) -> dict:
    document = copy.deepcopy(document)
    document["config"]["training"]["gradient_sync_mode"] = requested
    document["strategy_details"] = {
        "gradient_sync_mode": {"requested": requested, "resolved": resolved}
    }
    return document


def at_world(document: dict, size: int, tokens_per_s: float) -> dict:
    document = copy.deepcopy(document)
    document["environment"]["world_size"] = size
    document["config"]["launch"]["nproc_per_node"] = size
    document["summary"]["tokens_per_s"] = {**document["summary"]["tokens_per_s"]}
    document["summary"]["tokens_per_s"]["mean"] = tokens_per_s
    return document


def row(text: str, start: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(start))
    return [cell.strip() for cell in line.strip("|").split("|")]


def column(text: str, name: str) -> int:
    header = next(line for line in text.splitlines() if line.startswith("| strategy |"))
    return [cell.strip() for cell in header.strip("|").split("|")].index(name)


def test_runs_that_differ_only_in_gradient_sync_are_two_rows_without_scaling_between():
    auto = with_sync(run_document("ddp-w2.json"), "auto", "last")
    every = with_sync(at_world(run_document("ddp-w2.json"), 2, 11567.0), "every", "every")
    records = [train_record(d) for d in (auto, every)]
    assert grouping.variant_key(records[0]) != grouping.variant_key(records[1])
    assert grouping.settings_key(auto) == grouping.settings_key(every)
    assert [scaling_efficiency(r, records) for r in records] == [None, None]
    text = render_markdown(build_report([auto, every]))
    assert text.count("### Training") == 1
    last, each = row(text, "| ddp | — | last (auto) |"), row(text, "| ddp | — | every |")
    assert last[column(text, "scaling eff.")] == each[column(text, "scaling eff.")] == "—"


def test_a_strategy_option_makes_its_own_row_and_is_shown():
    plain = run_document("ddp-w2.json")
    options = variant("ddp-w2.json", config__strategy_options={"bucket_cap_mb": 1})
    records = [train_record(d) for d in (plain, options)]
    assert grouping.variant_key(records[0]) != grouping.variant_key(records[1])
    assert [scaling_efficiency(r, records) for r in records] == [None, None]
    text = render_markdown(build_report([plain, options]))
    assert row(text, "| ddp | bucket_cap_mb=1 |")[column(text, "scaling eff.")] == "—"


def test_two_identical_runs_at_one_world_size_get_no_scaling_efficiency():
    first = run_document("ddp-w2.json")
    second = at_world(first, 2, 2 * first["summary"]["tokens_per_s"]["mean"])
    records = [train_record(d) for d in (first, second)]
    assert [scaling_efficiency(r, records) for r in records] == [None, None]


def test_scaling_efficiency_across_world_sizes_of_equal_runs_only():
    one = at_world(run_document("ddp-w2.json"), 1, 1000.0)
    two = at_world(run_document("ddp-w2.json"), 2, 1500.0)
    every = with_sync(at_world(run_document("ddp-w2.json"), 2, 1900.0), "every", "every")
    records = [train_record(d) for d in (one, two, every)]
    assert scaling_efficiency(records[1], records) == pytest.approx(0.75)
    assert scaling_efficiency(records[0], records) is None
    assert scaling_efficiency(records[2], records) is None  # no run of its variant at 1
    text = render_markdown(build_report([one, two, every]))
    assert "| 75.0% |" in text


def test_a_different_learning_rate_is_another_table_named_by_it():
    other = variant("fsdp-w2.json")
    other["config"]["training"]["lr"] = 0.001
    text = render_markdown(build_report([run_document("ddp-w2.json"), other]))
    titles = [line for line in text.splitlines() if line.startswith("### Training")]
    assert len(titles) == 2
    assert titles[0].endswith("training.lr 0.0003") and titles[1].endswith("training.lr 0.001")


def test_step_time_memory_and_tokens_are_mean_and_std_when_repeated():
    documents = [run_document("ddp-w2.json"), run_document("fsdp-w2.json")]
    text = render_markdown(build_report(documents))
    repeated, single = row(text, "| ddp |"), row(text, "| fsdp |")
    index = column(text, "step ms")
    assert repeated[index] == "11.73 ± 0.47" and "±" not in single[index]
    assert repeated[column(text, "peak memory")] == "319.3 ± 0.5 MiB"
    assert repeated[column(text, "tokens/s")] == "10,923 ± 434"
    assert "±" not in single[column(text, "peak memory")]


def titles(documents: list[dict]) -> list[str]:
    return [title for title, _ in plots.figures(documents)]


def test_one_world_size_gets_throughput_bars_and_no_scaling_line():
    shown = titles([run_document("ddp-w2.json"), run_document("fsdp-w2.json")])
    assert "Throughput per run (± std over trials)" in shown
    assert not any(t.startswith("Scaling") for t in shown)


def test_two_world_sizes_of_one_variant_get_a_scaling_line():
    one = at_world(run_document("ddp-w2.json"), 1, 1000.0)
    two = at_world(run_document("ddp-w2.json"), 2, 1500.0)
    fsdp = run_document("fsdp-w2.json")
    assert "Scaling (dashed: ideal scaling)" in titles([one, two, fsdp])
    assert plots.scaling_series([one, two, fsdp]) == {"ddp [sync last]": [(1, 1000.0), (2, 1500.0)]}


def test_the_step_time_legend_is_beside_the_bars_not_over_them():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plots.step_breakdown(plt, [run_document("ddp-w2.json"), run_document("fsdp-w2.json")])
    try:
        figure.canvas.draw()
        axes = figure.axes[0]
        legend = axes.get_legend().get_window_extent()
        assert legend.x0 >= axes.get_window_extent().x1
    finally:
        plt.close(figure)


def test_a_scaling_base_with_other_threads_per_rank_is_flagged():
    one = at_world(run_document("ddp-w2.json"), 1, 1000.0)
    two = at_world(run_document("ddp-w2.json"), 2, 1500.0)
    one["environment"]["torch_threads"], two["environment"]["torch_threads"] = 2, 1
    text = render_markdown(build_report([one, two]))
    notes = row(text, "| ddp | — | last (auto) | 1.00 | 2 |")[column(text, "notes")]
    assert notes == "scaling base ran 2 threads/rank, this run 1"
    two["environment"]["torch_threads"] = 2
    text = render_markdown(build_report([one, two]))
    assert row(text, "| ddp | — | last (auto) | 1.00 | 2 |")[column(text, "notes")] == "—"
