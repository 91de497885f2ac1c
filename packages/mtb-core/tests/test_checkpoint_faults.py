"""Real 2-rank ddp runs against checkpoint faults (issue 19): a resume past steps in its way,
two writers on one directory, a disk that fills up during a save."""

import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import child_env, mtb_subprocess, read_json

from mtb.checkpoint import layout, lock
from mtb.checkpoint.metadata import check_intact
from mtb.fault.obstacles import paused

pytestmark = pytest.mark.timeout(600)
#: core's data-parallel test strategy (the ddp strategy is another package's)
PLUGIN = {"MTB_PLUGIN_MODULES": "mtb_test_allreduce", "MTB_LOAD_PLUGINS": ""}
TWO_RANKS = [
    "run", "--strategy", "test-allreduce", "--nproc-per-node", 2, "--device", "cpu",
    "--preset", "tiny",
    "--warmup-steps", 0, "--save-every", 2, "--dropout", "0.1", "--record-digests",
    "--timeout", 240,
]  # fmt: skip


def error_lines(done) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("Error:")]


@pytest.mark.slow
def test_resume_latest_finishes_past_a_lagging_latest(tmp_path):
    """The issue's reproduction: latest set back to step 4 while step 6 is READY."""
    ck = tmp_path / "ck"
    first = mtb_subprocess(
        [*TWO_RANKS, "--checkpoint-dir", ck, "--steps", 6, "--output", tmp_path / "a.json"],
        env=PLUGIN,
    )
    assert first.returncode == 0, first.stderr
    (ck / layout.LATEST).write_text("step_00000004\n")
    resumed = mtb_subprocess(
        [
            *TWO_RANKS,
            "--checkpoint-dir",
            ck,
            "--steps",
            6,
            "--output",
            tmp_path / "b.json",
            "--resume",
            "latest",
        ],
        PLUGIN,
    )
    assert resumed.returncode == 0, resumed.stderr
    done = read_json(tmp_path / "b.json")
    assert done["checkpoint"]["resumed"]["step"] == 4
    assert done["state_digests"] == read_json(tmp_path / "a.json")["state_digests"]
    (moved,) = done["checkpoint"]["cleared"]["moved_aside"]
    assert (moved["source"], moved["reason"]) == ("step_00000006", "stale")
    (line,) = [x for x in resumed.stderr.splitlines() if x.startswith("mtb: cleared the way")]
    assert f"step_00000006 -> {moved['target']}" in line
    assert (ck / moved["target"] / layout.READY).is_file()  # kept as it was
    assert [e.step for e in layout.published(ck)] == [2, 4, 6]
    assert layout.read_latest(ck) == "step_00000006"
    cleaned = mtb_subprocess(["checkpoint", "clean", ck])
    assert cleaned.returncode == 0 and f"removed {ck / moved['target']}" in cleaned.stdout
    assert sorted(p.name for p in ck.glob("step_*")) == [f"step_0000000{s}" for s in (2, 4, 6)]


def wait_for_holder(lock_file, pid: int, timeout_s: float = 120) -> None:
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        if lock_file.is_file() and f'"pid": {pid}' in lock_file.read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"{lock_file} never named pid {pid}")


@pytest.mark.slow
def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    ck = tmp_path / "ck"
    args = [*TWO_RANKS, "--checkpoint-dir", ck, "--steps", 40, "--save-every", 20]
    env = child_env(PLUGIN)
    holder = subprocess.Popen(
        [sys.executable, "-m", "mtb", *map(str, args), "--output", str(tmp_path / "a.json")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_holder(ck / lock.LOCK, holder.pid)
        with paused(holder.pid):  # the holder cannot finish first on a fast machine
            second = mtb_subprocess([*args, "--output", tmp_path / "b.json"], PLUGIN, timeout=120)
            cleaning = mtb_subprocess(["checkpoint", "clean", ck], timeout=120)
        _, holder_err = holder.communicate(timeout=300)
    finally:
        holder.kill()
    busy = f"is in use by mtb run (pid {holder.pid} on {socket.gethostname()}, since "
    assert second.returncode == 2
    (line,) = error_lines(second)
    assert (
        line.startswith(f"Error: checkpoint.dir: {ck} {busy}") and "Traceback" not in second.stderr
    )
    assert not (tmp_path / "b.json").exists()  # refused before anything started
    assert cleaning.returncode == 2 and busy in cleaning.stderr
    assert holder.returncode == 0, holder_err
    assert read_json(tmp_path / "a.json")["status"] == "ok"
    assert [e.step for e in layout.published(ck)] == [20, 40]


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs: room for one tiny ddp checkpoint (about 0.7 MiB), not two."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.slow
def test_a_full_disk_fails_the_save_in_one_line_and_keeps_the_older_checkpoint(
    tmp_path, small_disk
):
    ck = small_disk / "ck"
    out = tmp_path / "r.json"
    done = mtb_subprocess(
        [*TWO_RANKS, "--checkpoint-dir", ck, "--steps", 6, "--output", out], PLUGIN
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "unexpected pos" not in done.stderr
    (line,) = error_lines(done)
    assert "No space left on device while saving step_00000004 into " in line
    assert f"{ck} (" in line and "free of 1.0 MiB)" in line
    document = read_json(out)
    assert document["status"] == "failed" and "No space left on device" in document["error"]
    assert [e.step for e in layout.published(ck)] == [2] and check_intact(ck / "step_00000002")
    assert layout.read_latest(ck) == "step_00000002"


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
    """RLIMIT_FSIZE in the launched process (inherited by its workers): EFBIG, not SIGXFSZ."""
    import resource

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    ck, out = tmp_path / "ck", tmp_path / "r.json"
    args = [*TWO_RANKS, "--checkpoint-dir", ck, "--steps", 4, "--output", out]
    done = subprocess.run(
        [sys.executable, "-m", "mtb", *map(str, args)],
        env=child_env(PLUGIN), preexec_fn=cap, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = error_lines(done)
    assert (
        "No space left on device (a file reached the file-size limit) while saving "
        f"step_00000002 into {ck} (" in line
    )
    assert "No space left on device" in read_json(out)["error"]
    assert not layout.published(ck) and layout.read_latest(ck) is None
