"""``python -m mtb ...`` children with a hard limit, keeping what a fault report needs.

Each child gets its own process group, so a launch past its limit is killed
together with the workers it started: a hung smoke never leaves ranks behind.
"""

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import attrs

#: variables of an enclosing launch that would make a child believe it is a worker
INHERITED = (
    "MTB_COMMAND_LINE",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
)
KEY_LINE = re.compile(r"^(Error: |mtb: )")
RANK_LINE = re.compile(r"^mtb: rank (\d+): (.*)$")


@attrs.frozen
class Launch:
    """One finished (or killed) child: its command, exit code, time and output."""

    label: str
    args: list[str]
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def failed(self) -> bool:
        """Exited by itself with a non-zero code (a timeout is not a clean failure)."""
        return not self.timed_out and self.returncode != 0

    def key_lines(self) -> list[str]:
        """The one-line messages of mtb and its ranks, without progress bars."""
        return [line for line in self.stderr.splitlines() if KEY_LINE.match(line)]

    def rank_errors(self) -> dict[int, str]:
        """What each rank said when it failed, by rank."""
        return {
            int(m.group(1)): m.group(2)
            for m in map(RANK_LINE.match, self.key_lines())
            if m and not m.group(2).startswith("resuming")
        }

    def error_line(self) -> str | None:
        """The launcher's final ``Error:`` line, if any."""
        errors = [line for line in self.key_lines() if line.startswith("Error: ")]
        return errors[-1] if errors else None

    def evidence(self) -> dict:
        return {
            "label": self.label,
            "command": shlex.join(["mtb", *self.args]),
            "exit_code": self.returncode,
            "timed_out": self.timed_out,
            "seconds": round(self.seconds, 2),
            "stderr": [line[:400] for line in self.key_lines()[-20:]],
        }


def _child_env(file_limit: int | None = None) -> dict:
    """The environment minus torchrun's variables; under a file-size cap, no bytecode.

    Python does not check how much of a ``.pyc`` it wrote: under RLIMIT_FSIZE
    a module compiled on first import would be cut short at the cap and left
    in the installation's ``__pycache__``, breaking every later import of it.
    """
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    if file_limit is not None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _file_limit(size: int | None):
    """A ``preexec_fn`` capping every file the child (and its workers) writes (RLIMIT_FSIZE).

    Python ignores SIGXFSZ, so a write past the cap fails with EFBIG instead
    of killing the process.
    """
    if size is None:
        return None
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def start(args: list[str], cwd, file_limit: int | None = None) -> subprocess.Popen:
    """``python -m mtb ARGS`` in ``cwd``, in a session of its own, output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "mtb", *args],
        cwd=cwd,
        env=_child_env(file_limit),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_file_limit(file_limit),
    )


def finish(label: str, args: list[str], child, started: float, timeout_s: float) -> Launch:
    """Wait for a started child; past ``timeout_s`` kill its process group."""
    try:
        out, err = child.communicate(timeout=timeout_s)
        code = child.returncode
    except subprocess.TimeoutExpired:
        _kill_group(child.pid)
        out, err = child.communicate()
        code = None
    finally:
        _kill_group(child.pid)
    return Launch(label, list(args), code, time.perf_counter() - started, out, err)


def mtb(label: str, args: list[str], cwd, timeout_s: float, file_limit=None) -> Launch:
    """Run ``python -m mtb ARGS`` in ``cwd``; past ``timeout_s`` kill its process group."""
    started = time.perf_counter()
    return finish(label, args, start(args, cwd, file_limit), started, timeout_s)
