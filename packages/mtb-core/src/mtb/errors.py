"""Exceptions that the CLI turns into one-line messages and exit codes.

Exit codes: 0 ok, 1 run failed, 2 usage or configuration error, 128 + N stopped
by signal N (130 Ctrl-C, 143 SIGTERM), as a shell reports a process a signal killed;
138 (SIGUSR1) also after a save, with checkpoint.save_on_signal (mtb.preemption).
"""

import signal
import sys


def say(line: str) -> None:
    """One line on stderr in a single write, so lines of ranks sharing the stream never run
    into each other (print writes the text and its newline separately)."""
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()


def warn(message: str) -> None:
    """One warning line on stderr: the run goes on."""
    say(f"mtb: warning: {message}")


def one_line(error: BaseException) -> str:
    """The first line of an error's message; the type is kept for unexpected errors."""
    text = str(error).splitlines()[0] if str(error) else ""
    if isinstance(error, MtbError):
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class MtbError(Exception):
    """Base for errors that carry a message meant for the user."""

    exit_code = 1


class UsageError(MtbError):
    """Bad input: a flag, a config field, an unknown or unavailable plugin."""

    exit_code = 2


class ConfigError(UsageError):
    """A configuration field holds a value that is not allowed."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PluginError(UsageError):
    """A plugin failed to load (strict mode) or registered a clashing name."""


class RunFailed(MtbError):
    """A run started but did not finish: a worker failed or timed out."""


class NonFiniteError(RunFailed):
    """A loss or gradient was NaN or infinite; every rank stops with the same message."""


def found_in(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``error`` or the first exception of ``kind`` it was raised from or during."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class PluginsFailed(RunFailed):
    """The run finished and its result is written; plugins failed in observing or rendering
    it (each already said on stderr). No rank failed: the launcher says so without a rank."""


class Interrupted(RunFailed):
    """The run was stopped by a signal to the launcher (Ctrl-C, SIGTERM): exit 128 + N."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


class Preempted(Interrupted):
    """Every rank saved the completed step and stopped on SIGUSR1 (checkpoint.save_on_signal):
    exit 138, as if SIGUSR1 had killed the run, but resumable from that step."""

    def __init__(self, step: int):
        RunFailed.__init__(
            self, f"stopped by SIGUSR1 after saving step {step}; resume with --resume latest"
        )
        self.signum = signal.SIGUSR1
        self.exit_code = 128 + signal.SIGUSR1
        self.step = step
