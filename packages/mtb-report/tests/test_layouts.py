"""Layouts in the report: each run's label, and runs of one global batch compared across layouts."""

import pytest
from report_fixtures import variant

from mtb_report.records import train_record
from mtb_report.tables import build_report

pytestmark = pytest.mark.timeout(60)


def layout_run(label: str, layout: dict, micro_batch: int, accumulation: int, rate: float):
    """The 2-rank fsdp fixture as if trained under ``layout`` on a global batch of 4."""
    document = variant(
        "fsdp-w2.json",
        environment__layout={**layout, "label": label},
        config__data__micro_batch_size=micro_batch,
        config__training__grad_accum_steps=accumulation,
        config__strategy="nd",
    )
    document["summary"]["tokens_per_s"]["mean"] = rate
    return document


def test_layouts_of_one_global_batch_share_a_table_in_throughput_order():
    runs = [
        layout_run("dp2", {"dp_shard": 2, "tp": 1}, 2, 1, 3000.0),
        layout_run("tp2", {"dp_shard": 1, "tp": 2}, 4, 1, 5000.0),
        layout_run("dp2·tp2", {"dp_shard": 2, "tp": 2}, 1, 2, 4000.0),
    ]
    for run in runs[1:]:
        run["trials"][0]["tokens_per_step"] = runs[0]["trials"][0]["tokens_per_step"]
    assert [train_record(r)["layout"] for r in runs] == ["dp2", "tp2", "dp2·tp2"]
    tables = build_report(runs).sections[0].tables
    layouts = [t for t in tables if t.title.startswith("Layouts")]
    assert [t.title for t in layouts] == ["Layouts on a global batch of 4 sequences"]
    assert [row[0] for row in layouts[0].rows] == ["tp2", "dp2·tp2", "dp2"]
    assert [row[3] for row in layouts[0].rows] == ["4 x 1", "1 x 2", "2 x 1"]
