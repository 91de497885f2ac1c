"""--save-on-signal: SIGUSR1 to `mtb run` saves the completed step and stops with exit 138;
--resume latest then ends bit-identical to an uninterrupted run. Without the flag SIGUSR1
kills the run as before.

Real processes and real signals; each run is a child in a session of its own, killed at the
end whatever the test found. The straggler plugin slows every step (untimed, after the
step's metrics), so the signal lands well before the last step however fast the machine.
"""

import re
import signal

import pytest
from conftest import FIXED_PEAK, read_json

from mtb.fault.launcher_kill import still_running
from mtb.preemption import PREEMPTION_EXIT

STEPS = ["--preset", "tiny", "--steps", "12", "--warmup-steps", "0", *FIXED_PEAK]
# dropout and a schedule: RNG and scheduler state must resume exactly too
EXACT = ["--dropout", "0.1", "--lr-schedule", "cosine", "--record-digests", "--save-every", "2"]
SINGLE = ["--strategy", "single", *STEPS, *EXACT, "--timeout", "240"]
SLOW = {"MTB_PLUGIN_MODULES": "mtb_test_straggler", "MTB_TEST_SLOW_RANK": "0"}
SLOW = {**SLOW, "MTB_TEST_SLOW_MS": "200"}
STOPPED = re.compile(
    r"Error: stopped by SIGUSR1 after saving step (\d+); resume with --resume latest"
)


@pytest.mark.slow(reason="three runs of 12 steps: signalled, resumed and uninterrupted")
@pytest.mark.timeout(400)
def test_sigusr1_saves_and_stops_and_the_resumed_run_ends_bitwise_equal(launched, tmp_path):
    args = [*SINGLE, "--checkpoint-dir", tmp_path / "ck", "--save-on-signal"]
    reference = launched("reference", *SINGLE, "--checkpoint-dir", tmp_path / "ref")
    run = launched("signalled", *args, env=SLOW)
    run.saved()
    run.process.send_signal(signal.SIGUSR1)
    assert run.wait() == PREEMPTION_EXIT == 138, run.stderr()
    last = run.stderr().strip().splitlines()[-1]
    stopped = STOPPED.fullmatch(last)
    assert stopped, run.stderr()
    step = int(stopped.group(1))
    assert 2 <= step < 12
    assert (tmp_path / "ck" / "latest").read_text().strip() == f"step_{step:08d}"
    assert (tmp_path / "ck" / f"step_{step:08d}" / "READY").exists()
    doc = read_json(run.out)
    assert doc["status"] != "ok" and doc["error"] == last.removeprefix("Error: ")

    resumed = launched("resumed", *args, "--resume", "latest")
    assert resumed.wait() == 0, resumed.stderr()
    assert reference.wait() == 0, reference.stderr()
    done = read_json(resumed.out)
    assert done["checkpoint"]["resumed"]["step"] == step
    assert done["checkpoint"]["resumed"]["exact"] is True
    assert done["state_digests"] == read_json(reference.out)["state_digests"]


@pytest.mark.slow(reason="one run until its first checkpoint")
@pytest.mark.timeout(300)
def test_sigusr1_without_save_on_signal_kills_the_run_as_before(launched, tmp_path):
    run = launched("killed", *SINGLE, "--checkpoint-dir", tmp_path / "ck", env=SLOW)
    run.saved()
    run.process.send_signal(signal.SIGUSR1)
    assert run.wait() == -signal.SIGUSR1
    assert still_running(run.seen, 10) == []
    assert not run.out.exists() or read_json(run.out)["status"] != "ok"


def test_save_on_signal_needs_a_checkpoint_directory(invoke, tmp_path):
    result = invoke("run", *STEPS, "--save-on-signal", "--output", tmp_path / "x.json")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: checkpoint.save_on_signal: needs checkpoint.dir (--checkpoint-dir)"
    ]
    assert not (tmp_path / "x.json").exists()
