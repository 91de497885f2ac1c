"""One cell in its own process tree: ``python -m mtb COMMAND FLAGS --output FILE``.

The command gets the matrix's timeout as its own ``--timeout`` (it then
stops its workers and writes a ``timeout`` result itself); the runner kills
the whole tree ``GRACE_S`` later if it is still there. Results are written
to a ``running/`` file and moved into place only once the cell is over, so
an interrupted cell never looks complete to ``--resume``.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs

from mtb.documents import result_document
from mtb.reporting import write_atomic
from mtb.results import STATUSES, error_class

GRACE_S = 60.0
POLL_S = 0.2
TERM_WAIT_S = 10.0
USAGE_EXIT = 2


@attrs.frozen
class Outcome:
    """How a cell's process ended and the result document it left."""

    document: dict
    returncode: int | None
    duration_s: float
    #: largest resident set of any process of the cell's tree (from wait4)
    process_peak_rss_bytes: int | None


def complete(path: Path) -> dict | None:
    """The result at ``path`` when it is a whole document with a final status."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(document, dict) and document.get("status") in STATUSES
    return document if ok else None


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, read from /proc (workers start their own sessions)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _signal_tree(pid: int, signum: int) -> None:
    for target in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signum)


def _reap(pid: int, deadline: float | None):
    """wait4 until the process ends or the deadline passes: (status, rusage) or None."""
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage
        if deadline is not None and time.monotonic() > deadline:
            return None
        time.sleep(POLL_S)


def stop(process: subprocess.Popen):
    """SIGTERM the cell's tree (its launcher stops its workers), SIGKILL what is left."""
    _signal_tree(process.pid, signal.SIGTERM)
    ended = _reap(process.pid, time.monotonic() + TERM_WAIT_S)
    if ended is None:
        _signal_tree(process.pid, signal.SIGKILL)
        ended = _reap(process.pid, None)
    process.returncode = os.waitstatus_to_exitcode(ended[0])
    return ended


def last_error(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error:")]
    return errors[-1] if errors else next((line for line in reversed(lines) if line), "")


def own_document(command: str, cell, status: str, error: str, returncode: int | None) -> dict:
    """The result of a cell whose process left none (killed, or refused its flags)."""
    error_kind = "usage" if status == "failed" and returncode == USAGE_EXIT else None
    return result_document(
        "matrix_cell",
        status=status,
        error=error,
        error_class=error_kind or error_class(status, error),
        command=command,
        cell=cell.id,
        options=cell.options,
    )


def run(command: str, cell, argv: list[str], result: Path, timeout_s: float, log: Path) -> Outcome:
    """Run the cell to its end; its result document ends up at ``result``."""
    running = result.parent.parent / "running" / result.name
    running.parent.mkdir(parents=True, exist_ok=True)
    result.parent.mkdir(parents=True, exist_ok=True)
    running.unlink(missing_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "mtb", *command.split(), *argv, "--output", str(running)]
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen(
            args, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            ended = _reap(process.pid, started + timeout_s + GRACE_S)
            killed = ended is None
            if killed:
                ended = stop(process)
            process.returncode = os.waitstatus_to_exitcode(ended[0])
        except BaseException:  # interrupted: leave nothing that looks complete
            stop(process)
            running.unlink(missing_ok=True)
            raise
    duration = time.monotonic() - started
    document = complete(running)
    if killed:
        message = f"cell exceeded its timeout of {timeout_s:g} s and was killed"
        document = own_document(command, cell, "timeout", message, None)
        write_atomic(result, json.dumps(document, indent=2) + "\n")
    elif document is None:
        document = own_document(command, cell, "failed", last_error(log), process.returncode)
        write_atomic(result, json.dumps(document, indent=2) + "\n")
    else:
        os.replace(running, result)
    running.unlink(missing_ok=True)
    rss = ended[1].ru_maxrss * 1024 if ended[1].ru_maxrss else None
    return Outcome(document, process.returncode, duration, rss)
