"""Real 2-rank runs against checkpoint faults (issue 19): a file-size limit during a save, a
held directory refused before and under torchrun.

A resume past stale steps, two writers on one directory (and `checkpoint clean` meanwhile)
and a disk that fills up (a real small tmpfs) are the fault smoke's stale-steps,
two-writers and disk-full scenarios (tests/test_fault_smoke_damage.py).
"""

import os
import subprocess
import sys

import pytest
from conftest import FIXED_PEAK, child_env, read_json

from mtb.checkpoint import layout, lock

pytestmark = pytest.mark.timeout(600)
#: core's data-parallel test strategy (the ddp strategy is another package's)
PLUGIN = {"MTB_PLUGIN_MODULES": "mtb_test_allreduce", "MTB_LOAD_PLUGINS": ""}
TWO_RANKS = [
    "run", "--strategy", "test-allreduce", "--nproc-per-node", 2, "--device", "cpu",
    "--preset", "tiny",
    "--warmup-steps", 0, "--save-every", 2, "--dropout", "0.1", "--record-digests",
    "--timeout", 240, *FIXED_PEAK,
]  # fmt: skip


def error_lines(done) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("Error:")]


def test_a_held_directory_refuses_a_one_process_run_before_it_starts(invoke, tmp_path):
    ck = tmp_path / "ck"
    with lock.held(ck, "mtb test"):
        done = invoke("run", "--preset", "tiny", "--steps", 2, "--warmup-steps", 0,
                      "--checkpoint-dir", ck, "--save-every", 1,
                      "--output", tmp_path / "r.json")  # fmt: skip
    assert done.exit_code == 2
    assert f"is in use by mtb test (pid {os.getpid()} on " in done.output
    assert not (tmp_path / "r.json").exists() and not list(ck.glob("step_*"))


@pytest.mark.slow
def test_under_torchrun_a_refused_run_leaves_a_failure_document(tmp_path):
    """Workers had started when rank 0 finds the directory taken: the refusal is recorded."""
    ck, out = tmp_path / "ck", tmp_path / "r.json"
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
              "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "-m", "mtb"]  # fmt: skip
    args = [*TWO_RANKS[5:], "--steps", 2, "--checkpoint-dir", ck, "--output", out]
    with lock.held(ck, "mtb test"):
        done = subprocess.run(
            [*launch, "run", "--strategy", "test-allreduce", *map(str, args)],
            env=child_env(PLUGIN), capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    assert done.returncode != 0
    document = read_json(out)
    assert document["status"] == "failed"
    assert f"is in use by mtb test (pid {os.getpid()} on " in document["error"]


@pytest.mark.slow
def test_a_file_size_limit_fails_the_save_in_one_line_without_root(tmp_path):
    """RLIMIT_FSIZE in the launched process (inherited by its workers): EFBIG, not SIGXFSZ.

    No bytecode is written under the cap: a module first imported there would leave
    a cut-short .pyc behind for every later test (mtb.fault.launch does the same).
    """
    import resource

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    ck, out = tmp_path / "ck", tmp_path / "r.json"
    args = [*TWO_RANKS, "--checkpoint-dir", ck, "--steps", 4, "--output", out]
    env = {**child_env(PLUGIN), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mtb", *map(str, args)],
        env=env, preexec_fn=cap, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = error_lines(done)
    assert (
        "No space left on device (a file reached the file-size limit) while saving "
        f"step_00000002 into {ck} (" in line
    )
    assert "No space left on device" in read_json(out)["error"]
    assert not layout.published(ck) and layout.read_latest(ck) is None
