"""Save on a signal and stop: what a batch job needs before it is preempted or times out.

Slurm warns a job with SIGUSR1 (``sbatch --signal=USR1@N``), to every process of
its step or to ``mtb run`` alone. With ``checkpoint.save_on_signal`` that signal no
longer kills anything: the launcher (:func:`forwarding`) passes it on to its
workers, and each process that receives it, launcher and workers alike (mtb.lifeline
takes it in a worker), only sets :data:`REQUESTED`. After each optimizer step every
rank asks whether any rank was signalled (mtb.checkpoint.session); if so each saves
the completed step, waits for the save to be published and stops with
errors.Preempted: ``mtb run`` exits with :data:`PREEMPTION_EXIT`, and a restart with
``--resume latest`` continues exactly.

Without the setting SIGUSR1 keeps its default action: the process dies by it.
No torch here: mtb.lifeline imports this module before torch starts any thread.
"""

import contextlib
import os
import signal
import threading
from pathlib import Path

#: the signal that asks for a save and a stop
SIGNAL = signal.SIGUSR1
#: the exit status of ``mtb run`` stopped that way (128 + SIGUSR1, as a shell reports a
#: process that SIGUSR1 killed): a job script can tell it from a failure and requeue
PREEMPTION_EXIT = 128 + SIGNAL
#: set by the launcher for its workers: "1" take the signal, "requested" it came already
VARIABLE = "MTB_SAVE_ON_SIGNAL"
#: set in a process that received the signal
REQUESTED = threading.Event()


def taken_by_workers() -> bool:
    """True in a worker whose launcher asked it to take the signal (mtb.lifeline)."""
    return os.environ.get(VARIABLE) in ("1", "requested")


def inherited() -> None:
    """In a worker started after its launcher got the signal (a restarted group): take it
    as received."""
    if os.environ.get(VARIABLE) == "requested":
        REQUESTED.set()


def workers(pid: int) -> list[int]:
    """The processes ``pid`` started as ``python -m mtb.lifeline`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != pid:
                continue
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if b"mtb.lifeline" in command:
            found.append(int(entry.name))
    return found


@contextlib.contextmanager
def forwarding(enabled: bool):
    """While ``mtb run`` runs: SIGUSR1 sets REQUESTED here and goes on to the workers.

    Workers started meanwhile take the signal (``MTB_SAVE_ON_SIGNAL``); a group that
    the elastic agent restarts after the signal starts with it received. Does
    nothing unless ``enabled``.
    """
    if not enabled:
        yield
        return

    def note(signum, frame):
        REQUESTED.set()
        os.environ[VARIABLE] = "requested"
        for worker in workers(os.getpid()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(worker, SIGNAL)

    REQUESTED.clear()
    previous_variable = os.environ.get(VARIABLE)
    os.environ[VARIABLE] = "1"
    previous = signal.signal(SIGNAL, note)
    try:
        yield
    finally:
        signal.signal(SIGNAL, previous)
        if previous_variable is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = previous_variable
