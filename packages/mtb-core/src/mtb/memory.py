"""Per-rank memory caps: sizes like ``2GiB`` and the RLIMIT_DATA that enforces them.

A capped process whose allocation would pass the limit gets a catchable
allocation failure (``DefaultCPUAllocator: can't allocate memory``) instead of
being killed by the kernel, so an out-of-memory run leaves a classified
result. The limit is inherited by every process started after it is set.

RLIMIT_DATA counts address space, not resident pages, and glibc's dynamic
mmap threshold lets freed large tensors turn into heap that is never given
back: sharded strategies, which gather and free blocks all the time, then
looked bigger than replicated ones. A capped run therefore pins the
threshold (``MALLOC_MMAP_THRESHOLD_``, unless the user set it) so tensors of
128 KiB and more are mapped and unmapped on their own.
"""

import contextlib
import os
import re

UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kib": 2**10,
    "m": 2**20,
    "mib": 2**20,
    "g": 2**30,
    "gib": 2**30,
    "t": 2**40,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
MMAP_THRESHOLD_VARIABLE = "MALLOC_MMAP_THRESHOLD_"
MMAP_THRESHOLD_BYTES = 128 * 2**10
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes in ``text`` (``2GiB``, ``1.5G``, ``512MiB``, ``800MB``, ``1073741824``).

    Raises ValueError naming the accepted forms.
    """
    match = SIZE.match(str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in UNITS:
        raise ValueError(f"{text!r} is not a size like 2GiB, 512MiB, 1.5G or 800MB")
    return int(float(match.group(1)) * UNITS[unit])


def format_size(count: int | None) -> str:
    """``2.00 GiB`` style, for tables."""
    if count is None:
        return "n/a"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(count) >= scale:
            return f"{count / scale:,.2f} {unit}"
    return f"{count} B"


def cap(limit_bytes: int) -> None:
    """Lower this process's RLIMIT_DATA soft limit to ``limit_bytes`` (never above the hard one)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit_bytes = min(limit_bytes, hard)
    if soft == resource.RLIM_INFINITY or limit_bytes < soft:
        resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, hard))


def current_cap() -> int | None:
    """This process's RLIMIT_DATA soft limit in bytes, None when unlimited."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    return None if soft == resource.RLIM_INFINITY else soft


def pin_mmap_threshold() -> None:
    """Large allocations mapped on their own, in this process and in those it starts."""
    import ctypes

    threshold = int(os.environ.setdefault(MMAP_THRESHOLD_VARIABLE, str(MMAP_THRESHOLD_BYTES)))
    with contextlib.suppress(OSError, AttributeError):  # not glibc: the variable alone
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, threshold)


def apply(launch) -> None:
    """Cap this process (and the workers it will start) as ``launch.memory_limit_per_rank`` says."""
    if launch.memory_limit_per_rank:
        pin_mmap_threshold()
        cap(parse_size(launch.memory_limit_per_rank))
