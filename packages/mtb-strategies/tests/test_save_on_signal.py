"""--save-on-signal on 2 ddp ranks: SIGUSR1 to the launcher reaches both workers, every rank
saves the same step, the launcher exits 138 with one line, and --resume latest ends
bit-identical to an uninterrupted run."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import BASE, PLUGIN_DIR, launch

# dropout and a schedule: RNG and scheduler state must resume exactly too
ARGS = [
    "--steps", "12", "--save-every", "2", "--dropout", "0.1", "--lr-schedule", "cosine",
    "--record-digests", "--save-on-signal",
]  # fmt: skip
STOPPED = re.compile(
    r"Error: stopped by SIGUSR1 after saving step (\d+); resume with --resume latest"
)


def start(tmp_path, *args) -> subprocess.Popen:
    """``mtb run --strategy ddp`` on 2 ranks, each step paced, in a session of its own."""
    env = {
        **os.environ,
        "MTB_PLUGIN_MODULES": "mtb_test_pace",
        "MTB_TEST_PACE_MS": "200",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PLUGIN_DIR), os.environ.get("PYTHONPATH")])
        ),
    }
    command = [sys.executable, "-m", "mtb", "run", "--strategy", "ddp", *BASE]
    command += ["--nproc-per-node", "2", "--output", str(tmp_path / "signalled.json")]
    with open(tmp_path / "signalled.stderr", "w") as stderr:
        return subprocess.Popen(
            [*command, *map(str, args)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )


@pytest.mark.slow(reason="three 2-rank launches: signalled, resumed and uninterrupted")
@pytest.mark.timeout(600)
def test_sigusr1_to_the_launcher_saves_on_every_rank_and_resumes_bitwise_equal(tmp_path):
    ck = tmp_path / "ck"
    run = start(tmp_path, *ARGS, "--checkpoint-dir", ck)
    try:
        give_up = time.monotonic() + 240
        while not (ck / "latest").exists():
            assert run.poll() is None, (tmp_path / "signalled.stderr").read_text()
            assert time.monotonic() < give_up, "no checkpoint published in time"
            time.sleep(0.05)
        run.send_signal(signal.SIGUSR1)
        code = run.wait(240)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            for process in psutil.Process(run.pid).children(recursive=True):
                process.kill()
        run.kill()
    stderr = (tmp_path / "signalled.stderr").read_text()
    assert code == 138, stderr
    assert not [line for line in stderr.splitlines() if line.startswith("mtb: rank")], stderr
    stopped = STOPPED.fullmatch(stderr.strip().splitlines()[-1])
    assert stopped, stderr
    step = int(stopped.group(1))
    assert 2 <= step < 12
    assert (ck / "latest").read_text().strip() == f"step_{step:08d}"

    args = [*ARGS, "--checkpoint-dir", ck, "--resume", "latest"]
    done, resumed, _ = launch("ddp", tmp_path, *args, name="resumed")
    assert done.returncode == 0, done.stderr
    record = resumed["checkpoint"]["resumed"]
    assert (record["step"], record["exact"]) == (step, True)
    done, reference, _ = launch("ddp", tmp_path, *ARGS, "--checkpoint-dir", tmp_path / "ref")
    assert done.returncode == 0, done.stderr
    assert resumed["state_digests"] == reference["state_digests"]
