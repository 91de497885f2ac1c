"""Stale build locks of torch extensions, found before a ZeRO run waits on one forever.

DeepSpeed JIT-compiles its C++ ops (on CPU: ``deepspeed_shm_comm``) through
``torch.utils.cpp_extension.load``, which serialises builds with a
``FileBaton``: the builder creates ``BUILD_DIR/lock`` with O_CREAT|O_EXCL,
keeps that descriptor open while ninja runs, and deletes the file when done;
every other process polls until the file is gone, without a time limit.
A builder killed mid-build (a timeout, Ctrl-C) never deletes it.

A lock is therefore stale when no process has the file open: the kernel
closes a dead process's descriptors, and a live builder holds its own until
it releases the lock. Open files are read from /proc/PID/fd, so only this
machine's processes are seen (a builder on another host sharing the cache
over NFS would not be); without /proc nothing is judged stale.

mtb refuses the run with one line naming the file rather than deleting it:
removing a lock is safe only if the judgement is right, and the user can see
what we cannot (another host, another container).
"""

import os
import time
from pathlib import Path

PROC = Path("/proc")
#: FileBaton.release closes the descriptor, then deletes the file: microseconds apart
RELEASE_WINDOW_S = 1.0


def extensions_root() -> Path:
    """Where torch builds extensions: TORCH_EXTENSIONS_DIR, else its per-user cache."""
    configured = os.environ.get("TORCH_EXTENSIONS_DIR")
    if configured:
        return Path(configured)
    from torch.utils.cpp_extension import get_default_build_root

    return Path(get_default_build_root())


def lock_files(root: Path) -> list[Path]:
    """``root/NAME/lock`` (TORCH_EXTENSIONS_DIR) and ``root/pyXY_ACC/NAME/lock`` (default)."""
    return sorted({*root.glob("*/lock"), *root.glob("*/*/lock")})


def open_files() -> set[Path] | None:
    """Every file some process on this machine has open (None: /proc cannot tell)."""
    if not (PROC / "self" / "fd").is_dir():
        return None
    found = set()
    for fd_dir in PROC.glob("[0-9]*/fd"):
        try:
            links = list(fd_dir.iterdir())
        except OSError:  # gone, or another user's process
            continue
        for link in links:
            try:
                found.add(Path(os.readlink(link)))
            except OSError:
                continue
    return found


def _unheld(locks: list[Path]) -> list[Path]:
    held = open_files()
    if held is None:
        return []
    return [lock for lock in locks if lock.exists() and lock.resolve() not in held]


def stale_locks(root: Path | None = None, confirm_s: float = RELEASE_WINDOW_S) -> list[Path]:
    """Build locks under ``root`` that no process on this machine holds open.

    A releasing builder closes its descriptor just before it deletes the file;
    a lock is judged stale only if it is still there, unheld, ``confirm_s`` later.
    """
    suspects = _unheld(lock_files(root or extensions_root()))
    if not suspects:
        return []
    time.sleep(confirm_s)
    return _unheld(suspects)


def check_no_stale_lock() -> None:
    """UsageError naming a stale lock and how to remove it, before a run waits on it."""
    from mtb.api import UsageError

    stale = stale_locks()
    if stale:
        raise UsageError(
            f"{stale[0]}: stale lock of an interrupted torch extension build (no process holds "
            f"it; a ZeRO run would wait on it forever); remove it with: rm {stale[0]}"
        )
