"""Plan documents (``mtb plan``) in the report: ranked predictions, refusals, verification, plots.

The fixture is the shape the planner writes, built here so that mtb-report's tests
never need the planner (packages meet only through result files).
"""

import copy

import pytest
from report_fixtures import other_kind, write

from mtb_report.plots import figures

pytestmark = pytest.mark.timeout(60)

GIB = 2**30
REFUSAL = "tp 3 must divide model.n_heads=8"


def prediction(step_ms: float, rate: float, mfu: float, peak: float, dominant: str) -> dict:
    return {
        "step_time_ms": step_ms,
        "tokens_per_s": rate,
        "mfu": mfu,
        "peak_memory_bytes": peak,
        "model_state_bytes": 3.7e8,
        "activation_bytes": 2.4e8,
        "buffer_bytes": 1e7,
        "runtime_bytes": 3e8,
        "compute_ms": step_ms - 112.0,
        "exposed_comm_ms": 112.0,
        "bubble_ms": 0.0,
        "dominant": dominant,
    }


def layout(label: str, rank, fits: bool, predicted, refused=None) -> dict:
    options = {"strategy": label.split("·")[0], "nproc_per_node": 2, "micro_batch_size": 2}
    return {
        "label": label,
        "strategy": options["strategy"],
        "options": options,
        "rank": rank,
        "fits": fits,
        "refused": refused,
        "predicted": predicted,
        "measured": None,
        "error": None,
    }


def plan(measured_profile: bool = True) -> dict:
    """Four layouts, written out of order: two that fit, one too big, one refused."""
    layouts = [
        layout("tp3", None, False, None, refused=REFUSAL),
        layout("ddp", 2, True, prediction(905.5, 1131.0, 0.37, 2.0e9, "all_reduce")),
        layout("fsdp", 1, True, prediction(812.0, 1261.0, 0.41, 1.2e9, "compute")),
        layout("ddp·noac", None, False, prediction(700.0, 1463.0, 0.48, 9.5e9, "compute")),
    ]
    profile = {"name": "cpu-small", "path": "profiles/cpu.json", "measured": measured_profile}
    workload = {"preset": "small", "global_batch": 4, "precision": "fp32", "seq_len": 256}
    world = {"nodes": 1, "devices_per_node": 2, "world_size": 2}
    return other_kind(
        "plan",
        config={"workload": workload, "world": world, "profile": {**profile, "device": "cpu"}},
        memory_capacity_bytes=8 * GIB,
        layouts=layouts,
    )


def verified_plan() -> dict:
    """The plan after its two fitting layouts ran; the ranking was wrong by 3 %."""
    document = copy.deepcopy(plan())
    runs = {
        "fsdp": ({"step_time_ms": 880.0, "peak_memory_bytes": 1.16e9}, -0.0773, 0.0345),
        "ddp": ({"step_time_ms": 850.0, "peak_memory_bytes": 2.1e9}, 0.0653, -0.0476),
    }
    for entry in document["layouts"]:
        if entry["label"] in runs:
            measured, step_error, memory_error = runs[entry["label"]]
            entry["measured"] = {"status": "ok", "tokens_per_s": 1200.0, **measured}
            entry["error"] = {"step_time": step_error, "peak_memory": memory_error}
            entry["error"]["model_state"] = 0.0
    document["verification"] = {
        "verified": 2,
        "median_abs_step_time_error": 0.0713,
        "max_abs_step_time_error": 0.0773,
        "median_abs_peak_memory_error": 0.0411,
        "max_abs_model_state_error": 0.0,
        "spearman": -1.0,
        "predicted_best": "fsdp",
        "measured_best": "ddp",
        "best_gap": 0.0353,
        "matrix_dir": "plan-verify/",
        "targets": {"median_abs_step_time_error": 0.15, "spearman": 0.8},
        "met": {"median_abs_step_time_error": True, "spearman": False},
    }
    return document


def table(text: str, title: str) -> list[str]:
    """The Markdown rows (header and separator dropped) of the table whose title starts so."""
    block = text.split(f"### {title}", 1)[1].split("\n### ", 1)[0]
    return [line for line in block.splitlines() if line.startswith("| ")][1:]


def test_a_plan_in_a_directory_renders_ranked_with_refused_and_unfitting_after(invoke, tmp_path):
    write(tmp_path / "plans" / "plan.json", plan())
    text = invoke("report", tmp_path).output
    assert "### Plan (predicted from a measured device profile)" in text
    assert "| workload | small, global_batch 4, precision fp32, seq_len 256 |" in text
    assert "| world | 1 node(s) x 2 device(s) (world size 2) |" in text
    assert "| device profile | cpu-small (measured on cpu) |" in text
    assert "| layouts | 2 fit, 1 do not fit, 1 refused |" in text
    assert "| verification | not run |" in text
    rows = table(text, "Plan: layouts ranked")
    assert rows == [
        "| 1 | fsdp | 812.00 | 1,261 | 41.00% | 1.1 GiB of 8.0 GiB | 700.0 · 112.0 · 0.0 "
        "| compute | — |",
        "| 2 | ddp | 905.50 | 1,131 | 37.00% | 1.9 GiB of 8.0 GiB | 793.5 · 112.0 · 0.0 "
        "| all_reduce | — |",
        "| — | ddp·noac | 700.00 | 1,463 | 48.00% | 8.8 GiB of 8.0 GiB | 588.0 · 112.0 · 0.0 "
        "| compute | does not fit: 867.9 MiB over capacity |",
        f"| — | tp3 | — | — | — | — | — | — | refused: {REFUSAL} |",
    ]
    assert "Plan verification" not in text


def test_an_unmeasured_profile_is_said_in_the_titles(invoke, tmp_path):
    text = invoke("report", write(tmp_path / "plan.json", plan(measured_profile=False))).output
    wording = "predicted, not measured: the device profile was not measured"
    assert f"### Plan ({wording})" in text
    assert f"### Plan: layouts ranked ({wording})" in text
    assert "| device profile | cpu-small (not measured) |" in text


def test_verification_sets_prediction_beside_measurement_and_targets(invoke, tmp_path):
    text = invoke("report", write(tmp_path / "plan.json", verified_plan())).output
    assert "| verification | 2 layout(s) ran (matrix in plan-verify/) |" in text
    assert table(text, "Plan verification: predicted vs measured") == [
        "| fsdp | 812.00 | 880.00 | -7.7% | 1.1 GiB | 1.1 GiB | +3.5% | +0.0% | ok |",
        "| ddp | 905.50 | 850.00 | +6.5% | 1.9 GiB | 2.0 GiB | -4.8% | +0.0% | ok |",
    ]
    summary = table(text, "Plan verification: summary")
    assert summary[0] == "| predicted best layout | fsdp (measured: ddp) | — | — |"
    assert "| median \\|step-time error\\| | 7.1% | ≤ 15.0% | yes |" in summary
    assert "| Spearman rank correlation | -1.00 | ≥ 0.80 | no |" in summary
    assert "| max \\|model-state error\\| | 0.0% | — | — |" in summary


def test_plan_plots_are_embedded_and_the_scatter_needs_verification(invoke, tmp_path):
    bars = ["Plan: predicted tokens/s per layout", "Plan: predicted peak memory per rank"]
    scatter = "Plan verification: predicted vs measured step time"
    assert [title for title, _ in figures([plan()])] == bars
    made = figures([verified_plan()])
    assert [title for title, _ in made] == [*bars, scatter]
    assert all(png.startswith(b"\x89PNG") and len(png) > 1000 for _, png in made)
    out = tmp_path / "report.html"
    done = invoke("report", write(tmp_path / "plan.json", verified_plan()), "-o", out)
    assert done.exit_code == 0, done.output
    html = out.read_text()
    assert all(f'alt="{title}"' in html for title in [*bars, scatter])
    assert REFUSAL in html


def test_a_failed_plan_goes_to_the_failures_table(invoke, tmp_path):
    failed = {**plan(), "status": "failed", "error": "no device profile at profiles/cpu.json"}
    text = invoke("report", write(tmp_path / "plan.json", failed)).output
    assert "| plan | — | — | failed | no device profile at profiles/cpu.json |" in text
    assert "### Plan" not in text
