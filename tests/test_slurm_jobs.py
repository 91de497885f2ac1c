"""A Slurm matrix outlives its submitter and stops on request, on a real two-node cluster:
a SIGKILLed submitter is re-attached by --resume without any cell running twice, and
``mtb matrix cancel`` leaves no job and no process behind.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_slurm_runs import TINY, mtb, write_matrix

pytestmark = [pytest.mark.slow(reason="real Slurm jobs"), pytest.mark.timeout(300)]


def next_job_id() -> int:
    """Slurm's own count of submissions: the id its next job will get."""
    shown = subprocess.run(
        ["scontrol", "show", "config"], capture_output=True, text=True, check=True, timeout=30
    )
    line = next(line for line in shown.stdout.splitlines() if line.startswith("NEXT_JOB_ID"))
    return int(line.split("=")[1])


def recorded(out: Path) -> dict:
    try:
        return json.loads((out / "slurm" / "jobs.state").read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return {}


def wait_until(ready, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s} s"
        time.sleep(0.2)


def processes_in(folder: Path) -> set[int]:
    """PIDs whose working directory is ``folder`` (a job's script, srun, mtb and its ranks)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == folder:
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (an exited srun whose new parent, PID 1, has not reaped it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_killed_submitter_is_reattached_and_no_cell_runs_twice(slurm_cluster, tmp_path):
    options = {**TINY, "strategy": "single", "steps": 40}
    plan = write_matrix(tmp_path / "m.toml", "resumed", options, timeout_s=120)
    plan.write_text(plan.read_text() + "[axes]\nseed = [1, 2]\n")
    out = tmp_path / "out"
    before = next_job_id()
    command = [sys.executable, "-m", "mtb", "matrix", "run", str(plan), "--output-dir", str(out)]
    submitter = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: sum(bool(c.get("job_id")) for c in recorded(out).values()) == 2, "2 jobs")
    submitter.send_signal(signal.SIGKILL)
    submitter.wait(timeout=30)
    # as if it had died between sbatch and the record: that job is found by name, not resubmitted
    state = out / "slurm" / "jobs.state"
    record = json.loads(state.read_text())
    record["cells"]["seed=1"]["job_id"] = None
    state.write_text(json.dumps(record))
    again = mtb("matrix", "run", plan, "--output-dir", out, "--resume", "--poll-s", "0.5")
    assert again.returncode == 0, again.stderr
    assert "submitted" not in again.stderr  # re-attached, nothing submitted again
    assert next_job_id() - before == 2
    assert [len(cell["jobs"]) for cell in recorded(out).values()] == [2, 1]  # one adopted
    assert len(set(recorded(out)["seed=1"]["jobs"])) == 1
    matrix = json.loads((out / "matrix.json").read_text())
    assert [row["status"] for row in matrix["cells"]] == ["ok", "ok"]


def test_a_stopped_submitter_leaves_the_jobs_and_cancel_leaves_no_job_and_no_process(
    slurm_cluster, tmp_path
):
    options = {**TINY, "strategy": "single", "steps": 1000000, "timeout": 600}
    plan = write_matrix(tmp_path / "m.toml", "cancelled", options, timeout_s=600)
    plan.write_text(plan.read_text() + "[axes]\nseed = [1, 2]\n")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "mtb", "matrix", "run", str(plan), "--output-dir", str(out)]
    submitter = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_until(lambda: len(processes_in(out.resolve())) >= 4, "both jobs' processes")
    submitter.send_signal(signal.SIGTERM)
    assert submitter.wait(timeout=60) == 128 + signal.SIGTERM
    last = submitter.stderr.read().decode().strip().splitlines()[-1]
    assert last.startswith("Error: interrupted by SIGTERM; the submitted jobs go on: ")
    assert f"mtb matrix cancel {out}" in last
    status = mtb("matrix", "status", out)
    assert status.returncode == 0 and status.stdout.count("RUNNING") == 2, status.stdout
    started = processes_in(out.resolve())
    cancelled = mtb("matrix", "cancel", out)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith("cancelled 2 job(s): ")
    left = {pid for pid in started if running(pid)}
    assert not left, f"processes left after cancel: {left}"
    status = mtb("matrix", "status", out)
    assert status.stdout.count("CANCELLED") == 2 and "RUNNING" not in status.stdout
    before = next_job_id()
    resubmitted = mtb("matrix", "run", plan, "--output-dir", out, "--resume", "--detach")
    assert resubmitted.returncode == 0, resubmitted.stderr
    assert next_job_id() - before == 2  # cancelled cells are submitted again
    assert mtb("matrix", "cancel", out).stdout.startswith("cancelled 2 job(s): ")


def test_an_sbatch_refusal_is_the_cells_result_with_slurms_message(slurm_cluster, tmp_path):
    options = {**TINY, "strategy": "single", "slurm_partition": "nope"}
    plan = write_matrix(tmp_path / "m.toml", "refused", options)
    refused = mtb("matrix", "run", plan, "--output-dir", tmp_path / "out")
    assert refused.returncode == 1
    cell = json.loads((tmp_path / "out" / "cells" / "cell.json").read_text())
    assert (cell["status"], cell["error_class"]) == ("failed", "submit")
    assert cell["error"].startswith("cell cell: sbatch: invalid partition specified: nope")
    assert cell["error"] in refused.stderr
