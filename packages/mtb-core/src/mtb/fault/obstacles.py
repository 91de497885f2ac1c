"""Scenarios where something stands in a run's way: stale-steps, two-writers and disk-full."""

import contextlib
import os
import signal
import socket
import subprocess
import time

from mtb.checkpoint import layout, lock
from mtb.checkpoint.metadata import check_intact
from mtb.checkpoint.write_errors import NO_SPACE
from mtb.fault import launch
from mtb.fault.evidence import listing
from mtb.fault.outcome import Outcome
from mtb.fault.smoke import WORLD_SIZE, Smoke, Trained

KEPT = (2, 4, 6)
#: room for one tiny ddp checkpoint (about 0.7 MiB) but not two
DISK_SIZE = "1m"
#: without a tmpfs: a per-file cap above results and RNG states, below a DCP shard (~0.3 MB)
FILE_LIMIT = 200_000
FULL_DIR = "disk/ckpt"


def stale_steps(smoke: Smoke, outcome: Outcome) -> None:
    """``latest`` lagging at step 2 behind a READY step 4, and a step 6 that never became READY."""
    if not smoke.reference_ok(outcome):
        return
    directory = smoke.copy_reference(outcome, [2, 4, 6])
    (directory / layout.step_name(6) / layout.READY).unlink()
    layout.write_latest(directory, 2)
    run = smoke.train(outcome, "resumed", "--resume", "latest")
    cleared = (run.checkpoint.get("cleared") or {}).get("moved_aside", [])
    outcome.evidence["after_run"] = listing(directory)
    outcome.check(
        "--resume latest resumes at step 2 and saves steps 4 and 6 again",
        run.launch.returncode == 0 and run.resumed.get("step") == 2 and run.saved_steps() == [4, 6],
        {"exit_code": run.launch.returncode, "saved": run.saved_steps()},
    )
    outcome.check(
        "step 4 (stale) and step 6 (incomplete) were moved aside, kept, and said in one line",
        [(m["source"], m["reason"]) for m in cleared]
        == [(layout.step_name(4), "stale"), (layout.step_name(6), "incomplete")]
        and all((directory / m["target"]).is_dir() for m in cleared)
        and sum(line.startswith("mtb: cleared the way") for line in run.launch.key_lines()) == 1,
        cleared,
    )
    smoke.same_as_reference(outcome, "resume past the stale steps", run)
    cleaned = smoke.mtb(outcome, "clean", ["checkpoint", "clean", "ckpt"])
    outcome.evidence["after_clean"] = listing(directory)
    outcome.check(
        "`mtb checkpoint clean` removes what was moved aside; READY 2, 4, 6 and latest stay",
        cleaned.returncode == 0
        and sorted(p.name for p in directory.glob("step_*"))
        == [layout.step_name(s) for s in (2, 4, 6)]
        and layout.read_latest(directory) == layout.step_name(6),
        cleaned.stdout.strip().splitlines(),
    )


def _wait_for_holder(lock_file, pid: int, timeout_s: float) -> bool:
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        if lock_file.is_file() and f'"pid": {pid}' in lock_file.read_text(encoding="utf-8"):
            return True
        time.sleep(0.2)
    return False


@contextlib.contextmanager
def paused(pid: int):
    """The launcher ``pid`` stopped (SIGSTOP) for the block, then continued.

    Its lock stays held and its workers wait on it, however fast or slow this
    machine is.
    """
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def two_writers(smoke: Smoke, outcome: Outcome) -> None:
    """A second run and ``mtb checkpoint clean`` on a checkpoint directory while a first run
    writes into it."""
    folder = smoke.folder(outcome.name)
    args = [*smoke.run_flags(WORLD_SIZE, 40, 20), "--checkpoint-dir", "ckpt"]
    first_args = [*args, "--output", "first.json"]
    started = time.perf_counter()
    child = launch.start(first_args, folder)
    try:
        holding = _wait_for_holder(folder / "ckpt" / lock.LOCK, child.pid, smoke.timeout_s)
        second: launch.Launch | None = None
        cleaning: launch.Launch | None = None
        with paused(child.pid):  # the first run cannot finish before the second one starts
            if holding:
                second = smoke.mtb(outcome, "second", [*args, "--output", "second.json"])
                cleaning = smoke.mtb(outcome, "clean", ["checkpoint", "clean", "ckpt"])
    finally:
        first = launch.finish("first", first_args, child, started, smoke.timeout_s + 30)
        outcome.launches.insert(0, first.evidence())
    took_lock = outcome.check("the first run takes the directory's lock", holding, child.pid)
    if not took_lock or second is None or cleaning is None:
        return
    line = second.error_line() or ""
    outcome.check(
        "the second run exits 2 before training, naming the holder's pid",
        second.returncode == 2
        and f"is in use by mtb run (pid {child.pid} on {socket.gethostname()}, since " in line
        and "Traceback" not in second.stderr
        and not (folder / "second.json").exists(),
        {"exit_code": second.returncode, "error_line": line},
    )
    outcome.check(
        "`mtb checkpoint clean` exits 2 meanwhile, naming the holder's pid",
        cleaning.returncode == 2
        and f"is in use by mtb run (pid {child.pid} on " in (cleaning.error_line() or ""),
        {"exit_code": cleaning.returncode, "error_line": cleaning.error_line()},
    )
    outcome.check(
        "the first run finishes untouched: exit 0, READY steps 20 and 40",
        first.returncode == 0 and [e.step for e in layout.published(folder / "ckpt")] == [20, 40],
        {"exit_code": first.returncode, "listing": listing(folder / "ckpt")},
    )


def _full_run_checks(outcome: Outcome, run: Trained, directory) -> None:
    line = run.launch.error_line() or ""
    outcome.check(
        "the run exits 1 with one line: No space left on device, the directory, the free space",
        run.launch.returncode == 1
        and NO_SPACE in line
        and f"while saving step_00000004 into {FULL_DIR} (" in line
        and " free of " in line
        and "Traceback" not in run.launch.stderr,
        {"exit_code": run.launch.returncode, "error_line": line},
    )
    document = run.result or {}
    outcome.check(
        "a failure document carries the same error",
        document.get("status") == "failed" and NO_SPACE in (document.get("error") or ""),
        document.get("error"),
    )
    ready = [e.step for e in layout.published(directory)]
    outcome.check(
        "the older READY checkpoint (step 2) is intact and latest names it",
        ready == [2]
        and check_intact(directory / layout.step_name(2))
        and layout.read_latest(directory) == layout.step_name(2),
        {"ready_steps": ready, "latest": layout.read_latest(directory)},
    )


def _small_disk(disk) -> str | None:
    """Mount a small tmpfs on ``disk``; None when this machine does not allow it (not root)."""
    mount = ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(disk)]
    mounted = subprocess.run(mount, capture_output=True, text=True)
    return None if mounted.returncode == 0 else mounted.stderr.strip()[:200]


def disk_full(smoke: Smoke, outcome: Outcome) -> None:
    """A resume from the reference's step 2 whose save of step 4 finds no room.

    On a 1 MiB tmpfs (step 2 fits, step 4 does not); where no tmpfs can be
    mounted, under a file-size limit (RLIMIT_FSIZE) that the shards exceed.
    """
    if not smoke.reference_ok(outcome):
        return
    disk = smoke.folder(outcome.name) / "disk"
    disk.mkdir()
    refused = _small_disk(disk)
    limit = None if refused is None else FILE_LIMIT
    outcome.evidence["mechanism"] = (
        f"tmpfs of {DISK_SIZE}" if limit is None else f"RLIMIT_FSIZE {limit} bytes ({refused})"
    )
    try:
        directory = smoke.copy_reference(outcome, [2], FULL_DIR)
        run = smoke.train(
            outcome, "full", "--resume", "latest", directory=FULL_DIR, file_limit=limit
        )
        outcome.evidence["listing"] = listing(directory)
        _full_run_checks(outcome, run, directory)
    finally:
        if limit is None:
            subprocess.run(["umount", str(disk)], capture_output=True, check=False)
