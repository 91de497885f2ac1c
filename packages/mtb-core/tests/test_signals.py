"""Real signals to real launchers and workers: nothing outlives its launcher, blame is right,
and how a run ends does not depend on the strategy.

Each run is a child in a session of its own, so a signal to its group never reaches pytest;
every process it started is killed at the end, whatever the test found.
"""

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import FIXED_PEAK, TINY, as_from_a_terminal, child_env, mtb_subprocess, read_json

from mtb import hookimpl
from mtb.fault.launcher_kill import still_running

pytestmark = pytest.mark.timeout(300)

PLUGIN = {"MTB_PLUGIN_MODULES": "mtb_test_allreduce", "MTB_LOAD_PLUGINS": ""}
LONG = ["--preset", "tiny", "--steps", "100000", "--warmup-steps", "0", "--save-every", "2"]
LONG = [*LONG, *FIXED_PEAK]
TWO_RANKS = ["--strategy", "test-allreduce", "--nproc-per-node", "2"]


@pytest.fixture
def start(launched, tmp_path):
    """A long run of ARGS that saves every 2 steps, with the all-reduce test strategy."""

    def started(*args):
        checkpoints = ["--checkpoint-dir", tmp_path / "ck"]
        return launched("result", *LONG, "--timeout", "240", *args, *checkpoints, env=PLUGIN)

    return started


@pytest.mark.slow
def test_sigterm_to_rank_1_is_blamed_on_rank_1(start):
    run = start(*TWO_RANKS)
    run.saved()
    run.rank(1).send_signal(signal.SIGTERM)
    assert run.wait() == 1
    blame = f"rank 1 failed: stopped by SIGTERM from pid {os.getpid()}"
    assert run.stderr().strip().splitlines()[-1] == f"Error: {blame}"
    assert read_json(run.out)["error"] == blame


@pytest.mark.parametrize("strategy", [["--strategy", "single"], TWO_RANKS], ids=["single", "ddp"])
@pytest.mark.slow
def test_sigterm_to_the_launcher_ends_alike_for_every_strategy(start, strategy):
    run = start(*strategy)
    run.saved()
    run.process.send_signal(signal.SIGTERM)
    assert run.wait() == 128 + signal.SIGTERM
    lines = run.stderr().strip().splitlines()
    assert lines[-1] == "Error: interrupted by SIGTERM"
    assert not [line for line in lines if line.startswith("mtb: rank")]  # stopped, not failed
    doc = read_json(run.out)
    assert (doc["status"], doc["error"]) == ("failed", "interrupted by SIGTERM")
    assert still_running(run.seen, 10) == []


@pytest.mark.parametrize("strategy", [["--strategy", "single"], TWO_RANKS], ids=["single", "ddp"])
@pytest.mark.slow
def test_ctrl_c_prints_one_line_and_leaves_a_failure_document(start, strategy, tmp_path):
    """Over an earlier run's ok result too (--overwrite): the interrupted run's document
    replaces it, so the path never shows a result this run did not produce."""
    (tmp_path / "result.json").write_text(json.dumps({"kind": "train_result", "status": "ok"}))
    run = start(*strategy, "--overwrite")
    run.saved()
    os.killpg(run.process.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    assert run.wait() == 130
    stderr = run.stderr()
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert not [line for line in stderr.splitlines() if line.startswith("mtb: rank")], stderr
    assert stderr.strip().splitlines()[-1] == "Error: interrupted by SIGINT"
    doc = read_json(run.out)
    assert (doc["status"], doc["error"]) == ("failed", "interrupted by SIGINT")


@pytest.mark.parametrize("strategy", [["--strategy", "single"], TWO_RANKS], ids=["single", "ddp"])
@pytest.mark.slow
def test_a_failed_save_ends_alike_for_every_strategy(tmp_path, strategy):
    """A save refused once training ran is a run failure: exit 1 and a failure document."""
    (tmp_path / "ck" / "step_00000002").mkdir(parents=True)
    out = tmp_path / "result.json"
    args = [*TINY, "--save-every", "2", "--checkpoint-dir", tmp_path / "ck", "--output", out]
    done = mtb_subprocess(["run", *strategy, *args], env=PLUGIN)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "already exists and is never overwritten" in last
    doc = read_json(out)
    assert doc["status"] == "failed" and doc["error"] in last


class RaisingObserver:
    @hookimpl
    def mtb_run_end(self, context, result):
        raise ValueError("observer broke")


@pytest.mark.slow
def test_an_observer_that_raises_after_training_keeps_the_result(pm, invoke, tmp_path):
    pm.register(RaisingObserver(), name="raising-observer")
    out = tmp_path / "result.json"
    result = invoke("run", *TINY, "--output", out)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    failure = "mtb_run_end of plugin raising-observer failed: ValueError: observer broke"
    assert f"mtb: {failure}" in lines
    assert lines[-1] == (
        f"Error: result written to {out} and kept; 1 plugin(s) failed, first: {failure}"
    )
    assert "Traceback" not in result.output
    assert read_json(out)["status"] == "ok"
    assert json.loads(out.read_text())["trials"]


def sleeper(tmp_path, launcher_pid: int) -> subprocess.Popen:
    """``python -m mtb.lifeline mtb_test_sleeper`` as rank 1 of a launcher ``launcher_pid``."""
    env = {
        "MTB_LAUNCHER_PID": str(launcher_pid),
        "RANK": "1",
        "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json"),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "mtb.lifeline", "mtb_test_sleeper"],
        env=child_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )


@pytest.mark.timeout(60)
def test_a_worker_whose_launcher_is_already_gone_kills_itself(tmp_path):
    child = sleeper(tmp_path, launcher_pid=1)  # never its parent: as if it had died already
    out, _ = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL and "ready" not in out


@pytest.mark.timeout(60)
def test_a_signal_from_the_launcher_is_quiet_and_one_from_elsewhere_recorded(tmp_path):
    quiet = sleeper(tmp_path, launcher_pid=os.getpid())
    assert quiet.stdout.readline() == "ready\n"
    quiet.send_signal(signal.SIGTERM)
    _, err = quiet.communicate(timeout=30)
    assert quiet.returncode == -signal.SIGTERM and "mtb:" not in err
    assert not (tmp_path / "error.json").exists()

    other = sleeper(tmp_path, launcher_pid=os.getpid())
    assert other.stdout.readline() == "ready\n"
    killer = subprocess.Popen(["kill", "-INT", str(other.pid)])
    killer.wait(timeout=30)
    _, err = other.communicate(timeout=30)
    message = f"stopped by SIGINT from pid {killer.pid}"
    assert other.returncode == -signal.SIGINT
    assert err.strip() == f"mtb: rank 1: {message}" and "Traceback" not in err
    recorded = read_json(tmp_path / "error.json")
    assert (recorded["message"], recorded["signal"]) == (message, "SIGINT")
