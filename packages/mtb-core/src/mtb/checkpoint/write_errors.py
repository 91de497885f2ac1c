"""A save that cannot write its files: one line naming the directory and the free space.

A full disk reaches a save as an ``OSError`` (ENOSPC; EFBIG under a
file-size limit), as torch's C++ writers' short-write messages that lost the
errno ("unexpected pos 704 vs 598"), or wrapped per rank in DCP's
``CheckpointException``, a ``BaseException`` whose text is every rank's
traceback. All of these become one :class:`SaveFailed` line.
"""

import contextlib
import errno
import shutil
from pathlib import Path

from mtb.errors import Interrupted, MtbError, RunFailed, one_line

NO_SPACE = "No space left on device"
FULL = {
    errno.ENOSPC: NO_SPACE,
    errno.EDQUOT: f"{NO_SPACE} (disk quota exceeded)",
    errno.EFBIG: f"{NO_SPACE} (a file reached the file-size limit)",
}
#: what torch's writers say when a write came up short, without an errno
SHORT_WRITE = ("unexpected pos", "file write failed")
#: below this much free space a short write counts as a full disk
NEARLY_FULL_BYTES = 1 << 20


class SaveFailed(RunFailed):
    """A checkpoint save failed; the message is one line."""


def causes(error: BaseException):
    """``error``, its causes and contexts, and each rank's exception inside a DCP failure."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [error]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack += [current.__cause__, current.__context__]
        failures = getattr(current, "failures", None)
        if isinstance(failures, dict):
            stack += [pair[0] if isinstance(pair, tuple) else pair for pair in failures.values()]


def size(count: float) -> str:
    """``count`` bytes for people: 0 B, 12.3 KiB, 1.0 MiB, 77.9 GiB."""
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            break
        count /= 1024
    return f"{count:,.0f} B" if unit == "B" else f"{count:,.1f} {unit}"


def space(directory: Path) -> tuple[int, int] | None:
    """(free, total) bytes of the file system holding ``directory`` (None: unknown)."""
    try:
        usage = shutil.disk_usage(directory)
    except OSError:
        return None
    return usage.free, usage.total


def full_reason(error: BaseException, directory: Path) -> str | None:
    """Why the disk counts as full for this error, or None when it does not."""
    found = list(causes(error))
    for current in found:
        if isinstance(current, OSError) and current.errno in FULL:
            return FULL[current.errno]
    usage = space(directory)
    short = any(marker in str(current) for current in found for marker in SHORT_WRITE)
    nearly_full = usage is not None and usage[0] < max(NEARLY_FULL_BYTES, usage[1] // 100)
    return NO_SPACE if short and nearly_full else None


def describe(error: BaseException, directory: Path, step_name: str) -> str | None:
    """One line for a failed save, or None to let an ordinary error through unchanged."""
    reason = full_reason(error, directory)
    if reason is not None:
        usage = space(directory)
        free = f"{size(usage[0])} free of {size(usage[1])}" if usage else "free space unknown"
        return f"checkpoint.dir: {reason} while saving {step_name} into {directory} ({free})"
    if isinstance(error, Exception):
        return None
    ranks = getattr(error, "failures", None) or {}
    first = next(iter(ranks.values()), None)
    inner = first[0] if isinstance(first, tuple) else first
    detail = one_line(inner) if isinstance(inner, BaseException) else type(error).__name__
    return f"checkpoint save of {step_name} failed on rank(s) {sorted(ranks)}: {detail}"


@contextlib.contextmanager
def one_line_failures(directory: Path, step_name: str):
    """Turn a save's write failures (and DCP's BaseException) into one SaveFailed line."""
    try:
        yield
    except (MtbError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        stop = next((e for e in causes(error) if isinstance(e, Interrupted)), None)
        if stop is not None:  # a signal that landed inside DCP's save: the run was stopped
            raise stop from None
        line = describe(error, directory, step_name)
        if line is None:
            raise
        raise SaveFailed(line) from None
