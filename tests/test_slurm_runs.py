"""Matrices on a real two-node Slurm cluster (deploy/slurm/loopback_cluster.py): a two-node
run equals the same run started locally; failures keep Slurm's reasons; the report renders.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow(reason="real Slurm jobs"), pytest.mark.timeout(400)]
TINY = {"preset": "tiny", "steps": 6, "warmup_steps": 1, "peak_tflops": 1, "device": "cpu"}


def mtb(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mtb", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def toml_value(value) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value).lower()


def write_matrix(path: Path, name: str, options: dict, include=(), **top) -> Path:
    lines = [f'name = "{name}"', 'executor = "slurm"']
    lines += [f"{key} = {toml_value(value)}" for key, value in top.items()]
    lines += ["[options]", *(f"{k} = {toml_value(v)}" for k, v in options.items())]
    for cell in include:
        lines += ["[[include]]", *(f"{k} = {toml_value(v)}" for k, v in cell.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_two_nodes_through_slurm_end_where_two_local_ranks_do(slurm_cluster, tmp_path):
    options = {**TINY, "strategy": "ddp", "nnodes": 2, "nproc_per_node": 1}
    plan = write_matrix(tmp_path / "two.toml", "two", options, timeout_s=120)
    out = tmp_path / "out"
    submitted = mtb("matrix", "run", plan, "--output-dir", out, "--poll-s", "0.5")
    assert submitted.returncode == 0, submitted.stderr
    cell = json.loads((out / "cells" / "cell.json").read_text())
    assert cell["status"] == "ok" and cell["config"]["launch"]["nnodes"] == 2
    (row,) = json.loads((out / "matrix.json").read_text())["cells"]
    assert row["model_state_estimate_error"] is not None  # planned as the job runs it
    local_args = ["--strategy", "ddp", "--nproc-per-node", 2, "--output", tmp_path / "local.json"]
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    local = mtb("run", *flags, *local_args)
    assert local.returncode == 0, local.stderr
    expected = json.loads((tmp_path / "local.json").read_text())["summary"]["final_loss"]["mean"]
    assert cell["summary"]["final_loss"]["mean"] == pytest.approx(expected, rel=1e-5)
    logs = {path.name: path.read_text() for path in (out / "logs").iterdir()}
    assert set(logs) == {"cell.slurm.out", "cell.node0.log", "cell.node1.log"}
    for text in logs.values():  # the rendezvous shutdown stays quiet
        assert "Traceback" not in text and "recvVector" not in text, text


def test_four_cells_two_ok_one_refused_one_past_its_time_limit(slurm_cluster, tmp_path, slowed):
    slowed(100)  # the cell past its time limit sleeps its minute rather than spin a core
    cells = [
        {"strategy": "single"},
        {"strategy": "ddp", "nproc_per_node": 2},
        {"strategy": "single", "lr": -1.0},
        {"strategy": "single", "steps": 1000000, "slurm_time": "1", "timeout": 600},
    ]
    plan = write_matrix(tmp_path / "four.toml", "four", TINY, cells, timeout_s=120)
    out = tmp_path / "out"
    finished = mtb("matrix", "run", plan, "--output-dir", out, "--poll-s", "1")
    assert finished.returncode == 1 and "cell(s) failed" in finished.stderr
    matrix = json.loads((out / "matrix.json").read_text())
    rows = {row["cell"]: row for row in matrix["cells"]}
    assert [row["status"] for row in rows.values()] == ["ok", "ok", "failed", "timeout"]
    refused = rows["strategy=single,lr=-1.0"]
    assert refused["error_class"] == "usage" and "lr" in refused["error"]
    late = rows["strategy=single,steps=1000000,slurm_time=1,timeout=600"]
    assert late["slurm_state"] == "TIMEOUT"
    assert "ended TIMEOUT" in late["error"] and "TimeLimit" in late["error"]
    assert all(row["job_id"] for row in rows.values())
    report = (out / "report.md").read_text()
    assert all(cell_id in report for cell_id in rows)
    rendered = mtb("report", out)
    assert rendered.returncode == 0, rendered.stderr
