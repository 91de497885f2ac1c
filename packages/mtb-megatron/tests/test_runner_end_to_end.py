"""The runner against a Megatron-like checkout the test builds: launch, logs, hashes, parsing,
classification, validity, and the document and table that come out."""

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from mtb_megatron import transformer

SMALL = ["--num-layers", "2", "--global-batch-size", "4", "--train-iters", "6"]
SMALL += ["--log-interval", "2", "--timeout", "60"]


def invoke(cli, checkout, tmp_path, command, *args, mode="ok", monkeypatch=None):
    monkeypatch.setenv("FAKE_MEGATRON_MODE", mode)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = tmp_path / f"{mode}.json"
    argv = ["megatron", command, "--megatron-dir", str(checkout["path"])]
    argv += ["--megatron-ref", "v0.1-fake", *SMALL, *args, "--output", str(out)]
    result = CliRunner().invoke(cli, argv)
    return result, json.loads(out.read_text()) if out.exists() else None


def metrics_first_line(run):
    return run["metrics"]["first_iteration_line"] and run["metrics"]["measured_log_lines"] == 2


def test_matrix_launches_each_topology_and_records_everything(cli, checkout, tmp_path, monkeypatch):
    result, doc = invoke(
        cli, checkout, tmp_path, "matrix", "--topologies", "1x1,2x1", "--nproc-per-node", "2",
        monkeypatch=monkeypatch,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (doc["kind"], doc["mode"], doc["status"], doc["error"]) == (
        "megatron",
        "matrix",
        "ok",
        None,
    )
    assert doc["megatron"]["commit"] == checkout["head"] and doc["megatron"]["dirty"] is False
    assert doc["config"]["topologies"] == ["1x1", "2x1"] and doc["versions"]["torch"]
    assert [(r["topology"], r["dp"], r["repeat"]) for r in doc["runs"]] == [
        ("1x1", 2, 1),
        ("2x1", 1, 1),
    ]
    for run in doc["runs"]:
        assert run["command"][run["command"].index("--tensor-model-parallel-size") + 1] == str(
            run["tp"]
        )
        assert run["command"][1:5] == ["-m", "torch.distributed.run", "--standalone", "--nnodes"]
        assert run["environment_set"] == {
            "CUDA_DEVICE_MAX_CONNECTIONS": "1",
            "PYTHONUNBUFFERED": "1",
        }
        assert (run["exit_code"], run["failure"], run["timed_out"]) == (0, None, False)
        for stream in ("stdout", "stderr"):
            data = Path(run[stream]["path"]).read_bytes()
            assert run[stream]["sha256"] == hashlib.sha256(data).hexdigest()
            assert run[stream]["bytes"] == len(data)
        stdout = Path(run["stdout"]["path"]).read_text()
        assert f"tensor-model-parallel size: {run['tp']}," in stdout
        # the checkout is megatron-core 0.16.1: iteration 1 is printed and left out
        assert [i["iteration"] for i in run["iterations"]] == [1, 2, 4, 6]
        assert run["iterations"][0]["throughput_tflops_per_gpu"] == 50.1
        assert doc["megatron"]["core_version"] == "0.16.1" and metrics_first_line(run)
        ranks = [{"rank": r, "max_allocated_mb": 1000.0 + 10 * r, "max_reserved_mb": 2048.0}
                 for r in range(2)]  # fmt: skip
        assert run["metrics"]["memory_mb_by_rank"] == ranks
        assert run["max_allocated_mb"] == 1010.0 and len(run["memory_reports"]) == 2
        last = run["iterations"][-1]
        assert (last["lm_loss"], last["global_batch_size"], last["learning_rate"]) == (
            9.94,
            4,
            3e-4,
        )
        metrics = run["metrics"]
        assert metrics["elapsed_ms_per_iteration"]["mean"] == pytest.approx(105.0)
        assert (metrics["skipped_iterations"], metrics["nan_iterations"]) == (0, 0)
        assert run["elapsed_ms_per_iteration"] == pytest.approx(105.0) and run["lm_loss"] == 9.94
        # not performance evidence: the throughput is withheld from rows and summaries
        assert run["throughput_tflops_per_gpu"] is None and run["performance_valid"] is False
        assert run["gpu_memory"]["status"] == "skipped" and run["gpu_memory"]["reason"]
        assert run["gpu_exclusive_at_start"]["exclusive"] is None
    assert all(t["throughput_tflops_per_gpu"] is None for t in doc["topologies"])
    reasons = doc["performance_reasons"]
    assert doc["performance_valid"] is False
    assert reasons[:2] == [
        "evidence is compatibility (use --evidence performance)",
        "1 repeat(s), performance needs 3",
    ]
    assert any(r.startswith("GPU exclusivity not checked:") for r in reasons)
    assert "withheld" in result.output and "not performance-valid: " in result.output
    assert "2x1" in result.output and f"result written to {tmp_path}" in result.output


@pytest.mark.parametrize(
    ("mode", "status", "kind", "line"),
    [
        ("oom", "oom", "oom", "torch.OutOfMemoryError: CUDA out of memory."),
        ("nccl", "failed", "communication", "torch.distributed.DistBackendError: NCCL error"),
        ("nan", "failed", "nan", "RuntimeError: Rank 0: found NaN in local grad norm"),
        ("nan_count", "failed", "nan", None),
        ("import", "failed", "import", "ModuleNotFoundError: No module named 'transformer_engine'"),
    ],
)
def test_failures_are_classified_like_megatrons(
    cli, checkout, tmp_path, monkeypatch, mode, status, kind, line
):
    result, doc = invoke(cli, checkout, tmp_path, "run", mode=mode, monkeypatch=monkeypatch)
    assert result.exit_code == 1, result.output
    (run,) = doc["runs"]
    assert (doc["status"], run["status"], run["failure"]["kind"]) == ("failed", status, kind)
    if line:
        assert run["failure"]["line"].startswith(line) and run["failure"]["stream"] == "stderr"
        assert run["exit_code"] != 0
    else:  # exits 0, but Megatron counted a NaN iteration
        assert "number of nan iterations:   1" in run["failure"]["line"]
        assert run["exit_code"] == 0
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith(f"Error: 1 of 1 launches failed; first: 1x1 repeat 1 {kind}")
    assert "Traceback" not in result.output


def test_a_hanging_launch_is_stopped_at_its_timeout(cli, checkout, tmp_path, monkeypatch):
    result, doc = invoke(
        cli, checkout, tmp_path, "run", "--timeout", "4", mode="hang", monkeypatch=monkeypatch
    )
    assert result.exit_code == 1, result.output
    (run,) = doc["runs"]
    assert (run["status"], run["failure"]["kind"], run["timed_out"]) == ("timeout", "timeout", True)
    assert 4 <= run["duration_s"] < 20


def test_performance_evidence_needs_repeats_and_checked_gpus(cli, checkout, tmp_path, monkeypatch):
    monkeypatch.setattr(transformer, "engine_available", lambda: True)  # no fallback refusal
    result, doc = invoke(
        cli, checkout, tmp_path, "run", "--evidence", "performance", monkeypatch=monkeypatch
    )
    assert result.exit_code == 2 and doc is None
    assert result.output.strip() == (
        "Error: repeats: performance evidence needs at least 3 repeats, got 1"
    )
    result, doc = invoke(
        cli, checkout, tmp_path, "run", "--evidence", "performance", "--repeats", "3",
        "--image", "registry.example/megatron@sha256:abc", "--train-iters", "2",
        "--log-interval", "1", monkeypatch=monkeypatch,
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert [r["repeat"] for r in doc["runs"]] == [1, 2, 3] and doc["status"] == "ok"
    assert doc["image"] == {
        "image": "registry.example/megatron@sha256:abc", "source": "declared", "problem": None
    }  # fmt: skip
    assert doc["performance_valid"] is False
    assert doc["performance_reasons"][0].startswith("GPU exclusivity not checked: ")
    assert (
        "metadata missing: CUDA version, GPU models, GPU memory samples"
        in doc["performance_reasons"]
    )
    assert "Error: performance evidence requested but not valid: GPU exclusivity" in result.output
