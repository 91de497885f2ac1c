"""A launched worker's tie to its launcher: it dies with it and says who signalled it.

A worker would outlive a SIGKILLed launcher (torch starts each in a session of
its own) and go on training and publishing, so the kernel is told to SIGKILL
it when its parent goes (PR_SET_PDEATHSIG; elsewhere a thread polls the
parent). The launcher stops surviving ranks with the signal it got itself
(SIGTERM after a failure, SIGINT on Ctrl-C): such a worker dies by that signal
without a word. A signal from anyone else is recorded first, so the launcher
blames that rank, not the peers that lost their connection to it.

Workers start as ``python -m mtb.lifeline MODULE ARGS``: the signals are
blocked before anything starts a thread (importing torch does), so only the
thread that waits for them ever receives one. Processes a worker starts
inherit that mask and ignore those signals until they exit.

With ``checkpoint.save_on_signal`` (mtb.preemption) SIGUSR1 is taken too, from
anyone: it only sets ``preemption.REQUESTED``, and the worker goes on.
"""

import ctypes
import json
import os
import runpy
import signal
import sys
import threading
import time

from mtb import errors, preemption
from mtb.reporting import write_atomic

#: set by the launcher: the process every worker must die with
LAUNCHER_VARIABLE = "MTB_LAUNCHER_PID"
#: what torch's elastic agent forwards to its workers when it gets them itself
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def heeded() -> list[int]:
    """The forwarded signals this process does not ignore (nohup ignores SIGHUP)."""
    return [signum for signum in FORWARDED if signal.getsignal(signum) is not signal.SIG_IGN]


def launcher_pid() -> int:
    return int(os.environ.get(LAUNCHER_VARIABLE, os.getppid()))


def die_with(parent: int) -> None:
    """SIGKILL this process when ``parent`` exits, or now if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    else:
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # it went before the kernel was told
        os.kill(os.getpid(), signal.SIGKILL)


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


def record(message: str, echo: bool = True, **extra) -> None:
    """One line on stderr (unless ``echo`` is off) and in torchelastic's error file, for the
    launcher to report."""
    if echo:
        errors.say(f"mtb: rank {os.environ.get('RANK', '0')}: {message}")
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:  # whole or not at all: an out-of-memory rank may fail while writing
        document = {"message": message, "timestamp": int(time.time()), **extra}
        write_atomic(error_file, json.dumps(document))


def take_signals(parent: int) -> None:
    """Receive the heeded signals in one thread of their own (call before any other).

    Where there is no sigwaitinfo (macOS) they keep their default actions. SIGUSR1 is
    taken too where the launcher asks (mtb.preemption).
    """
    taken = heeded()
    if preemption.taken_by_workers():
        preemption.inherited()
        taken.append(preemption.SIGNAL)
    if not taken or not hasattr(signal, "sigwaitinfo"):
        return
    for signum in taken:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, taken)
    threading.Thread(target=_await_signal, args=(parent, taken), daemon=True).start()


def _await_signal(parent: int, taken: list[int]) -> None:
    """Record a signal that did not come from ``parent``, then die by it (SIGUSR1: note it
    in ``preemption.REQUESTED`` and wait on)."""
    info = signal.sigwaitinfo(taken)
    while info.si_signo == preemption.SIGNAL:
        preemption.REQUESTED.set()
        info = signal.sigwaitinfo(taken)
    if info.si_pid != parent:
        name = signal.Signals(info.si_signo).name
        record(f"stopped by {name} from pid {info.si_pid}", signal=name)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [info.si_signo])
    signal.pthread_kill(threading.get_ident(), info.si_signo)


def main() -> None:
    """``python -m mtb.lifeline MODULE ARGS``: tie this process, then run MODULE as main."""
    parent = launcher_pid()
    die_with(parent)
    take_signals(parent)
    module = sys.argv.pop(1)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
