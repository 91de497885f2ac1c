"""Scenario launcher-kill: the workers of a SIGKILLed ``mtb run`` go with it.

Workers live in sessions of their own, so nothing but mtb.lifeline stops
them from training on, publishing checkpoints and writing the result after
their launcher is killed outright.
"""

import contextlib
import signal
import time

from mtb.fault.evidence import listing
from mtb.fault.launch import Launch, start
from mtb.fault.outcome import Outcome
from mtb.fault.smoke import WORLD_SIZE, Smoke

STEPS = 100_000  # only the kill ends this run
GRACE_S = 5.0  # how long the workers may outlive their launcher
QUIET_S = 3.0  # how long nothing may change in the checkpoint folder afterwards


def launcher_kill(smoke: Smoke, outcome: Outcome) -> None:
    """SIGKILL the launcher once a checkpoint is published; no worker may survive it."""
    folder = smoke.folder(outcome.name)
    args = [*smoke.run_flags(WORLD_SIZE, STEPS, 2), "--checkpoint-dir", "ckpt"]
    args += ["--output", "killed.json"]
    begun = time.perf_counter()
    child = start(args, folder)
    workers = []
    try:
        workers = _workers_once_saved(child, folder / "ckpt" / "latest", smoke.timeout_s)
        outcome.check(
            f"the run trained with {WORLD_SIZE} workers and published a checkpoint",
            len(workers) == WORLD_SIZE,
            [w.pid for w in workers],
        )
        child.send_signal(signal.SIGKILL)
        child.wait()
        killed = time.perf_counter()
        survivors = still_running(workers, GRACE_S)
        outcome.check(
            f"every worker was gone within {GRACE_S:g} s of the launcher",
            workers and not survivors,
            {"survivors": [w.pid for w in survivors], "after_s": time.perf_counter() - killed},
        )
        _nothing_published_after(outcome, folder)
    finally:
        _kill(child, workers)
    out, err = child.communicate(timeout=30)
    launch = Launch("killed", args, child.returncode, time.perf_counter() - begun, out, err)
    outcome.launches.append(launch.evidence())


def _workers_once_saved(child, latest, timeout_s: float) -> list:
    """The launcher's descendants once ``latest`` exists (none if it never does)."""
    import psutil  # not at import: the fault command group loads with `mtb --help`

    give_up = time.monotonic() + timeout_s
    while not latest.exists():
        if child.poll() is not None or time.monotonic() > give_up:
            return []
        time.sleep(0.2)
    return psutil.Process(child.pid).children(recursive=True)


def still_running(processes: list, grace_s: float) -> list:
    """Those of ``processes`` still running after up to ``grace_s`` seconds.

    A zombie runs nothing: when PID 1 reaps it is not the run's business.
    """
    import psutil

    def running(process) -> bool:
        with contextlib.suppress(psutil.NoSuchProcess):
            return process.status() != psutil.STATUS_ZOMBIE
        return False

    give_up = time.monotonic() + grace_s
    while (alive := [p for p in processes if running(p)]) and time.monotonic() < give_up:
        time.sleep(0.05)
    return alive


def _nothing_published_after(outcome: Outcome, folder) -> None:
    before = listing(folder / "ckpt")
    time.sleep(QUIET_S)
    after = listing(folder / "ckpt")
    outcome.evidence["ckpt"] = {"after_kill": before, "later": after}
    outcome.check(
        f"nothing was published and no result written in the {QUIET_S:g} s after",
        before == after and not (folder / "killed.json").exists(),
        {"new": sorted(set(after) - set(before)), "result": (folder / "killed.json").exists()},
    )


def _kill(child, workers: list) -> None:
    """Whatever is left of the run, so a failed scenario leaves nothing running."""
    import psutil

    if child.poll() is None:
        child.kill()
    for worker in workers:
        with contextlib.suppress(psutil.Error):
            worker.kill()
