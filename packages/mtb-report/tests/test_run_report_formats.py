"""mtb-report's reporters behind ``mtb run --report``, and ``mtb report --append``."""

import json

import pytest

from mtb_report.grouping import settings_key

RUN = ["run", "--strategy", "single", "--preset", "tiny", "--steps", "2", "--warmup-steps", "1"]


@pytest.mark.slow(reason="trains a run, renders it three ways with plots (58 s seen under load)")
def test_a_run_renders_markdown_csv_and_html_beside_its_result(invoke, tmp_path):
    out = tmp_path / "result.json"
    reports = ["--report", "markdown", "--report", "csv", "--report", f"html:{tmp_path / 'r.html'}"]
    result = invoke(*RUN, "--output", out, *reports)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "result.md").read_text().startswith("# MiniTrainBench report")
    assert (tmp_path / "result.csv").read_text().startswith("kind,strategy,")
    assert "<!DOCTYPE html>" in (tmp_path / "r.html").read_text()
    used = json.loads(out.read_text())["components"]["reporters"]
    assert [(r["name"], r["distribution"]) for r in used] == [
        ("json", "mtb-core"),
        ("markdown", "mtb-report"),
        ("csv", "mtb-report"),
        ("html", "mtb-report"),
    ]


def test_report_append_adds_documents_to_a_json_lines_log(invoke, tmp_path):
    out, log = tmp_path / "result.json", tmp_path / "log.jsonl"
    assert invoke(*RUN, "--output", out, "--report", f"jsonl:{log}").exit_code == 0
    result = invoke("report", out, "--output", log, "--append")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines == [json.loads(out.read_text())] * 2


def test_a_json_lines_log_is_rendered_like_its_files(invoke, tmp_path):
    log = tmp_path / "log.jsonl"
    for number in (1, 2):
        out = tmp_path / f"r{number}.json"
        assert invoke(*RUN, "--output", out, "--report", f"jsonl:{log}").exit_code == 0
    from_log = invoke("report", log, "--format", "csv")
    from_files = invoke("report", tmp_path / "r1.json", tmp_path / "r2.json", "--format", "csv")
    assert from_log.exit_code == 0, from_log.output
    assert from_log.output == from_files.output
    assert len(from_log.output.splitlines()) == 3  # header and one row per run
    log.write_text(log.read_text() + "[1, 2]\n")
    broken = invoke("report", log)
    assert broken.exit_code == 2
    assert broken.output.strip() == f"Error: {log}:3: a result document is a JSON object"


def test_report_append_refuses_a_reporter_that_does_not_append(invoke, tmp_path):
    report = tmp_path / "report.md"
    report.write_text("kept\n")
    result = invoke("report", tmp_path, "--output", report, "--append")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: --append: reporter 'markdown' does not append; use one that does (jsonl)"
    )
    assert report.read_text() == "kept\n"


def test_runs_that_differ_only_in_their_reports_share_a_table():
    first = {"config": {"output": "a.json", "overwrite": False, "reports": []}}
    second = {"config": {"output": "b.json", "overwrite": True, "reports": ["jsonl:r.jsonl"]}}
    assert settings_key(first) == settings_key(second)
