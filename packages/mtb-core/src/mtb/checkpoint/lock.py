"""One writer per checkpoint directory: an exclusive ``flock`` on ``DIR/.mtb-lock``.

``mtb run`` holds it for the run's life (the launcher of node 0, or rank 0
under torchrun), ``mtb checkpoint clean`` while it cleans. A second writer
is refused before it starts, naming the holder (pid, host, start time) that
the lock file records. The kernel drops the lock when its holder exits, even
by SIGKILL, so a stale lock file never blocks anyone.
"""

import contextlib
import fcntl
import json
import os
import socket
from pathlib import Path

from mtb.errors import UsageError

LOCK = ".mtb-lock"


class DirectoryBusy(UsageError):
    """Another process holds the checkpoint directory's lock."""


def holder(path: Path) -> str:
    """Who holds the lock, as its file records it."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
        return f"{found['command']} (pid {found['pid']} on {found['host']}, since {found['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it has not recorded itself yet)"


def acquire(directory: Path, command: str):
    """The open, locked lock file of ``directory`` (created); DirectoryBusy when taken."""
    from mtb.provenance import utc_now

    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / LOCK, "a+", encoding="utf-8")  # noqa: SIM115 (held open)
    except OSError as error:
        raise UsageError(
            f"checkpoint.dir: cannot use {directory}: {error.strerror or error}"
        ) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise DirectoryBusy(
            f"checkpoint.dir: {directory} is in use by {holder(directory / LOCK)}; "
            "wait for it to end or use another --checkpoint-dir"
        ) from None
    record = {"command": command, "pid": os.getpid(), "host": socket.gethostname()}
    handle.truncate(0)
    handle.write(json.dumps({**record, "since": utc_now()}) + "\n")
    handle.flush()
    return handle


@contextlib.contextmanager
def held(directory: Path, command: str):
    """Hold ``directory``'s lock for the block."""
    handle = acquire(directory, command)
    try:
        yield
    finally:
        handle.close()


def for_run(config):
    """The lock a run holds on its checkpoint directory: only the process that writes
    metadata, READY and ``latest`` (node 0's launcher, or rank 0 under torchrun) takes it."""
    directory = config.checkpoint.dir
    node0 = config.launch.node_rank == 0 and os.environ.get("RANK", "0") == "0"
    if not directory or not node0:
        return contextlib.nullcontext()
    return held(Path(directory), "mtb run")
