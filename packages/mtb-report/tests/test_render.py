"""Markdown and CSV reports from real results; environment honesty; failures kept."""

import json

from report_fixtures import (
    FIXTURES,
    GOLDEN,
    RUNS,
    check_golden,
    other_kind,
    run_document,
    variant,
    write,
)

from mtb_report.loading import load


def test_markdown_matches_golden(invoke):
    done = invoke("report", RUNS)
    assert done.exit_code == 0, done.output
    check_golden("report.md", done.output)


def test_csv_matches_golden(invoke, tmp_path):
    out = tmp_path / "report.csv"
    done = invoke("report", RUNS, "-o", out)
    assert done.exit_code == 0, done.output
    check_golden("report.csv", out.read_text())


def test_failures_are_listed_with_their_error(invoke):
    text = invoke("report", RUNS).output
    assert "| train | ddp | 2 | timeout | launch exceeded launch.timeout_s=2 s |" in text
    assert "non-finite loss on rank(s) 0 at step 2" in text


def test_single_and_noisy_runs_are_labelled(invoke):
    text = invoke("report", RUNS).output
    start = "| fsdp | fsdp_reshard_after_forward=True | every (auto) |"
    fsdp = next(line for line in text.splitlines() if line.startswith(start))
    assert fsdp.endswith("| single run |")
    single = next(line for line in text.splitlines() if line.startswith("| single | — | — |"))
    assert "noisy (CV" in single and "±" in single


def test_files_and_directories_mix_and_count_once(invoke):
    done = invoke("report", RUNS / "single-w1.json", RUNS)
    assert done.exit_code == 0
    assert done.output.count("| single | — | — |") == 1


def test_mixed_torch_versions_never_share_a_table(invoke, tmp_path):
    write(tmp_path / "a.json", run_document("ddp-w2.json"))
    write(tmp_path / "b.json", variant("fsdp-w2.json", provenance__torch="2.12.0+cpu"))
    text = invoke("report", tmp_path).output
    assert "2 different environments (they differ in torch)" in text
    sections = text.split("\n## ")[1:]
    assert len(sections) == 2
    assert ("| ddp | — |" in sections[0]) != ("| ddp | — |" in sections[1])
    assert all(s.count("### Training") == 1 for s in sections)


def test_missing_provenance_and_unverified_get_banners(invoke, tmp_path):
    write(tmp_path / "a.json", variant("ddp-w2.json", provenance={}, verified=False))
    text = invoke("report", tmp_path).output
    assert "carry no provenance" in text and "marked unverified" in text


def test_a_null_git_revision_is_missing_provenance(invoke, tmp_path):
    unknown = {"revision": None, "dirty": None, "root": None}  # run outside a git checkout
    write(tmp_path / "a.json", variant("ddp-w2.json", provenance__git=unknown))
    assert "1 result(s) carry no provenance" in invoke("report", tmp_path).output


def test_an_mfu_above_100_percent_is_marked(invoke, tmp_path):
    mfu = {"n": 1, "mean": 1.013, "std": 0.0, "min": 1.013, "p50": 1.013, "max": 1.013}
    write(tmp_path / "a.json", variant("ddp-w2.json", summary__mfu=mfu))
    row = next(line for line in invoke("report", tmp_path).output.splitlines() if "| ddp |" in line)
    assert "101.30% (above peak!)" in row
    assert "MFU above 100 %: peak too low" in row


def test_unknown_schema_version_is_one_line_exit_2(invoke, tmp_path):
    path = write(tmp_path / "new.json", variant("ddp-w2.json", schema_version=7))
    done = invoke("report", path)
    assert done.exit_code == 2
    assert "schema_version 7 is not supported" in done.output
    assert "Traceback" not in done.output and len(done.output.strip().splitlines()) == 1


def test_invalid_train_document_names_the_field(invoke, tmp_path):
    document = run_document("ddp-w2.json")
    del document["summary"]
    done = invoke("report", write(tmp_path / "bad.json", document))
    assert done.exit_code == 2 and "summary" in done.output


def test_unknown_suffix_is_a_usage_error(invoke, tmp_path):
    done = invoke("report", RUNS, "-o", tmp_path / "report.pdf")
    assert done.exit_code == 2 and "'.pdf'" in done.output


def measurement(operation: str, size: int, busbw: float) -> dict:
    return {
        "operation": operation,
        "placement": "cpu",
        "mode": None,
        "status": "ok",
        "dtype": "float32",
        "bytes": size,
        "elements": size // 4,
        "time_us": 80.0,
        "algbw_gbps": busbw / 2,
        "busbw_gbps": busbw,
        "wrong_elements": 0,
    }


COMM = other_kind(
    "comm",
    environment={"world_size": 2, "backend": "gloo"},
    measurements=[measurement("all_reduce", 1024, 0.02), measurement("all_reduce", 4096, 0.05)],
)
TP = other_kind(
    "tp",
    tensors=[
        {
            "check": "column",
            "dtype": "float32",
            "tensor": "output",
            "max_abs_error": 1e-7,
            "max_rel_error": 2e-7,
            "tolerance": 1e-5,
            "ok": True,
        },
    ],
)
MOE = other_kind(
    "moe",
    moe={
        "tokens": 64,
        "assigned_per_expert": [20, 12, 16, 16],
        "kept_per_expert": [16, 12, 16, 16],
        "dropped": 4,
        "imbalance": 1.25,
    },
)


def test_comm_rows_render_with_bandwidths(invoke, tmp_path):
    text = invoke("report", write(tmp_path / "comm.json", COMM)).output
    assert (
        "| operation | placement | mode | dtype | bytes | time_us | algbw_gbps | busbw_gbps |"
        in text
    )
    assert "| all_reduce | cpu | — | float32 | 4096 | 80 | 0.025 | 0.05 | 0 | ok |" in text
    assert "| environment.world_size | 2 |" in text


def test_tp_and_moe_correctness_tables(invoke, tmp_path):
    write(tmp_path / "tp.json", TP)
    write(tmp_path / "moe.json", MOE)
    text = invoke("report", tmp_path).output
    assert "### Tensor/sequence-parallel correctness: rows" in text
    assert "| column | float32 | output | 1e-07 | 2e-07 | 1e-05 | yes |" in text
    assert (
        "| moe.dropped | 4 |" in text and "| moe.assigned_per_expert | [20, 12, 16, 16] |" in text
    )


def test_plots_cover_collectives_and_experts():
    from mtb_report.plots import figures

    titles = [title for title, png in figures([COMM, MOE]) if png.startswith(b"\x89PNG")]
    assert titles == ["Bus bandwidth", "Tokens per expert"]


def test_unknown_kind_falls_back_to_its_fields(invoke, tmp_path):
    document = other_kind("novel", summary={"answer": 42, "step_ms": {"mean": 3.5, "std": 0}})
    text = invoke("report", write(tmp_path / "novel.json", document)).output
    assert "### Kind 'novel'" in text
    assert "| summary.answer | 42 |" in text and "| summary.step_ms | 3.5 |" in text


def test_matrix_rows_get_status_counts(tmp_path):
    from mtb_report.markdown import MarkdownReporter

    cells = [{"strategy": "ddp", "status": "ok"}, {"strategy": "fsdp", "status": "oom"}]
    document = other_kind("matrix", cells=cells)
    text = MarkdownReporter().render(load([str(write(tmp_path / "m.json", document))]))
    assert "| oom | 1 |" in text and "| ok | 1 |" in text


def test_options_may_come_before_the_paths(invoke, tmp_path):
    out = tmp_path / "r.md"
    done = invoke("report", "-o", out, RUNS)
    assert done.exit_code == 0, done.output
    assert out.read_text() == (GOLDEN / "report.md").read_text()


def test_bare_report_prints_usage_naming_results(invoke):
    done = invoke("report")
    assert done.exit_code in (0, 2) and "RESULT..." in done.output and "compare" in done.output


def test_reporters_are_registered_by_the_report_plugin():
    from mtb.plugins import build_plugin_manager

    registry = build_plugin_manager().registry("reporter")
    owners = {entry.name: entry.plugin for entry in registry}
    assert {owners[name] for name in ("markdown", "csv", "html")} == {"report"}


def test_runtime_state_shows_where_a_run_resumed(invoke, tmp_path):
    document = run_document("fsdp-w2.json")
    resumed = {"path": "ckpt/step_00000002", "step": 2, "exact": True}
    document["trials"][0]["per_rank"][0]["checkpoint"] = {"start_step": 2, "resumed": resumed}
    text = invoke("report", write(tmp_path / "resumed.json", document)).output
    run = "fsdp [fsdp_reshard_after_forward=True; sync every]"
    assert f"| {run} | 2 | 1 | 4 | 1 | 512 | 2 | ckpt/step_00000002 (step 2, exact) |" in text


def test_megatron_runs_render_with_topology_first_and_withheld_throughput(invoke, tmp_path):
    run = {
        "topology": "2x1",
        "tp": 2,
        "pp": 1,
        "dp": 1,
        "repeat": 1,
        "status": "ok",
        "failure_kind": None,
        "elapsed_ms_per_iteration": 105.0,
        "throughput_tflops_per_gpu": None,
        "lm_loss": 9.94,
        "max_allocated_mb": 2345.67,
        "performance_valid": False,
        "iterations": [{"iteration": 2, "throughput_tflops_per_gpu": 50.2}],
    }
    document = other_kind("megatron", mode="matrix", performance_valid=False, runs=[run])
    text = invoke("report", write(tmp_path / "megatron.json", document)).output
    assert "### Megatron: rows" in text
    assert (
        "| topology | tp | pp | dp | repeat | status | failure_kind | elapsed_ms_per_iteration |"
        in text
    )
    assert "| 2x1 | 2 | 1 | 1 | 1 | ok | — | 105 | — | 9.94 | 2,346 | no |" in text


def test_moe_training_runs_get_routing_figures_and_a_tokens_per_expert_plot(invoke, tmp_path):
    from mtb_report.plots import figures

    document = json.loads((FIXTURES / "moe" / "moe-ddp-ep2.json").read_text())
    moe = {key: value["mean"] for key, value in document["summary"]["moe"].items()}
    write(tmp_path / "moe.json", document)
    text = invoke("report", tmp_path).output
    assert "### Mixture of experts" in text
    table = text.split("### Mixture of experts")[1].splitlines()
    row = next(line for line in table if line.startswith("| ddp"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2"
    assert cells[3] == f"{moe['dropped_fraction'] * 100:.1f}%"
    assert cells[4] == f"{moe['imbalance']:,.3f}"
    titles = [title for title, png in figures([document]) if png.startswith(b"\x89PNG")]
    assert "Tokens per expert (training)" in titles


def test_loss_curves_name_the_data_and_skip_short_runs():
    from mtb_report.plots import MIN_CURVE_STEPS, data_label, figures

    document = json.loads((FIXTURES / "moe" / "moe-ddp-ep2.json").read_text())
    steps = [{**document["trials"][0]["steps"][0], "step": n} for n in range(MIN_CURVE_STEPS)]
    long = {**document, "trials": [{**document["trials"][0], "steps": steps}]}
    on_file = {**long, "config": {**long["config"], "data": {"source": "data/corpus"}}}
    assert (data_label(long), data_label(on_file)) == ("synthetic", "corpus")
    short = {**long, "trials": [{**long["trials"][0], "steps": steps[:-1]}]}
    assert "Training loss per step" in [title for title, _ in figures([long, on_file])]
    assert "Training loss per step" not in [title for title, _ in figures([short])]
