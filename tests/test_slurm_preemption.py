"""Preemption and time limits lose nothing, on a real two-node Slurm cluster: a job requeued
by ``scontrol requeue`` and a job past its time limit (Slurm's SIGUSR1 warning: the ranks
save, the job requeues itself) both resume and end with the final state digests of an
uninterrupted run.

The straggler plugin (core's test plugins) slows every step after its timing, so that the
requeue and the warning land mid-run; the jobs inherit it through the environment sbatch
exports.
"""

import contextlib
import datetime
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from test_slurm_jobs import recorded, wait_until
from test_slurm_runs import mtb, write_matrix

pytestmark = pytest.mark.slow(reason="real Slurm jobs, each requeued at least once")
EXACT = {
    "strategy": "single",
    "preset": "tiny",
    "warmup_steps": 0,
    "peak_tflops": 1,
    "device": "cpu",
    "dropout": 0.1,
    "lr_schedule": "cosine",
    "record_digests": True,
    "save_every": 2,
    "checkpoint_dir": "ck",
    "timeout": 600,
}
#: what slurmctld logs (at debug2) each time it checks time limits and sends warnings
TIME_LIMIT_CHECK = "Testing job time limits and checkpoints"
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)\] (.*)$", re.M)


@pytest.fixture(scope="module", autouse=True)
def time_limit_checks_logged(slurm_cluster):
    """slurmctld logs its time-limit checks from the start (clear_of_a_time_limit_check)."""
    subprocess.run(["scontrol", "setdebug", "debug2"], check=True, timeout=30)


def clear_of_a_time_limit_check(slurm_cluster, margin_s: float = 15) -> None:
    """Returns once the next time-limit check of slurmctld is over ``margin_s`` away. It
    checks every 30 s from its start; a check that comes as a job starts sends the warning
    to no process (its step not launched yet: seen here) or to one that does not take it
    yet (still importing), and Slurm does not send it again. ``margin_s`` covers the
    submission, the launch and mtb's start."""
    log = slurm_cluster / "log" / "slurmctld.log"

    def checks() -> list[datetime.datetime]:
        lines = LOG_TIME.findall(log.read_text())
        start = [t for t, text in lines if "slurmctld version" in text][-1:]
        found = [t for t, text in lines if TIME_LIMIT_CHECK in text]
        return [datetime.datetime.fromisoformat(t) for t in start + found]

    seen = checks()
    upcoming = seen[-1] + datetime.timedelta(seconds=30) - datetime.datetime.now()
    if upcoming.total_seconds() < margin_s:
        wait_until(lambda: len(checks()) > len(seen), "a time-limit check", 60)


@contextlib.contextmanager
def requeued_jobs_start_at_once(out):
    """Slurm holds a requeued job for about two minutes (PENDING, reason BeginTime) before
    it may start again; here it may start at once (``scontrol update ... StartTime=now``)."""
    from mtb.slurm import scheduler

    done, held_since = threading.Event(), {}

    def hurry():
        while not done.wait(0.5):
            jobs = [entry.get("job_id") for entry in recorded(out).values()]
            for job in scheduler.states([j for j in jobs if j]).values():
                if not (job.state == "PENDING" and job.reason == "BeginTime"):
                    held_since.pop(job.job_id, None)
                    continue
                # not at once: the previous attempt's credential is still being revoked
                if time.monotonic() - held_since.setdefault(job.job_id, time.monotonic()) > 3:
                    update = ["scontrol", "update", f"JobId={job.job_id}", "StartTime=now"]
                    subprocess.run(update, check=False, capture_output=True, timeout=30)

    thread = threading.Thread(target=hurry, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=30)


@contextlib.contextmanager
def uninterrupted(tmp_path, steps: int):
    """The same run without a break, started at once beside the job (whose steps mostly
    sleep) and without the straggler: its sleeps change no state, only how long the
    reference takes. Yields a function that waits for its state digests."""
    flags = [
        f"--{k.replace('_', '-')}" if v is True else f"--{k.replace('_', '-')}={v}"
        for k, v in {**EXACT, "checkpoint_dir": tmp_path / "ref"}.items()
    ]
    out, err = tmp_path / "reference.json", tmp_path / "reference.err"
    command = [sys.executable, "-m", "mtb", "run", *flags, f"--steps={steps}", "--output", out]
    straggler = ("MTB_PLUGIN_MODULES", "MTB_TEST_SLOW_RANK", "MTB_TEST_SLOW_MS")
    env = {k: v for k, v in os.environ.items() if k not in straggler}
    with err.open("w") as stderr:
        process = subprocess.Popen(
            list(map(str, command)), stdout=subprocess.DEVNULL, stderr=stderr, env=env
        )

    def digests() -> dict:
        assert process.wait(timeout=300) == 0, err.read_text()
        return json.loads(out.read_text())["state_digests"]

    try:
        yield digests
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def finished_cell(out) -> dict:
    return json.loads((out / "cells" / "cell.json").read_text())


@pytest.mark.timeout(400)
def test_a_job_requeued_by_scontrol_resumes_exactly(slurm_cluster, tmp_path, slowed):
    slowed(150)
    plan = write_matrix(tmp_path / "m.toml", "requeued", {**EXACT, "steps": 40})
    out = tmp_path / "out"
    with uninterrupted(tmp_path, 40) as reference:
        assert mtb("matrix", "run", plan, "--output-dir", out, "--detach").returncode == 0
        wait_until(lambda: (out / "ck" / "latest").exists(), "a first checkpoint")
        job = recorded(out)["cell"]["job_id"]
        subprocess.run(["scontrol", "requeue", job], check=True, timeout=30)
        with requeued_jobs_start_at_once(out):
            watched = mtb("matrix", "run", plan, "--output-dir", out, "--resume", "--poll-s", "0.5")
        assert watched.returncode == 0, watched.stderr
        cell = finished_cell(out)
        assert cell["status"] == "ok" and cell["checkpoint"]["resumed"]["exact"] is True
        assert cell["checkpoint"]["resumed"]["step"] >= 2
        assert recorded(out)["cell"]["jobs"] == [job]  # the same job, run again
        status = mtb("matrix", "status", out).stdout
        assert re.search(r"COMPLETED\s*│\s*-\s*│\s*1\s*│\s*ok", status), status  # requeued once
        assert cell["state_digests"] == reference()


@pytest.mark.timeout(600)
def test_a_job_past_its_time_limit_saves_on_the_warning_and_resumes_exactly(
    slurm_cluster, tmp_path, slowed
):
    """A one-minute limit with the warning 35 s before it. Slurm checks time limits every
    30 s and warns at the first check that finds the limit within the warning plus 30 s: with
    these figures the first check of each attempt, so SIGUSR1 arrives up to 30 s into an
    attempt (8 and 25 s were seen), always before the check that would end the job (a warning
    window under 30 s could fall between two checks: TIMEOUT, no requeue). 80 steps of
    500 ms (40 s, after the start) outlast the first attempt. The job is submitted clear of
    a check (one as it starts would warn no process); a requeued attempt starts a few
    seconds after the check that warned the one before."""
    slowed(500)
    options = {**EXACT, "steps": 80, "slurm_time": "1", "slurm_signal_s": 35}
    plan = write_matrix(tmp_path / "m.toml", "preempted", options)
    out = tmp_path / "out"
    with uninterrupted(tmp_path, 80) as reference:
        clear_of_a_time_limit_check(slurm_cluster)
        with requeued_jobs_start_at_once(out):
            watched = mtb("matrix", "run", plan, "--output-dir", out, "--poll-s", "1", timeout=560)
        assert watched.returncode == 0, watched.stderr
        cell = finished_cell(out)
        assert cell["status"] == "ok" and cell["checkpoint"]["resumed"]["exact"] is True
        log = (out / "logs" / "cell.slurm.out").read_text()
        assert "saved on the warning signal; requeueing job" in log
        node0 = (out / "logs" / "cell.node0.log").read_text()
        assert "stopped by SIGUSR1 after saving step" in node0
        assert cell["state_digests"] == reference()
        assert os.path.isdir(out / "ck")
