"""nccl-tests arithmetic: element counts per size, algorithm and bus bandwidth.

A size is the bytes of the per-rank buffer nccl-tests names for each
operation: the (send = receive) buffer of all_reduce, broadcast and
send_recv, the receive buffer of all_gather, the send buffer of
reduce_scatter and all_to_all. Operations that split that buffer into one
chunk per rank round the element count down to a multiple of the world
size. algbw = bytes / time; busbw = algbw x the operation's factor, which
makes it comparable with the link bandwidth whatever the world size.
"""

SPLIT_OPERATIONS = ("all_gather", "reduce_scatter", "all_to_all")


def bus_factor(operation: str, world_size: int) -> float:
    n = world_size
    factors = {
        "all_reduce": 2 * (n - 1) / n,
        "all_gather": (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "all_to_all": (n - 1) / n,
        "broadcast": 1.0,
        "send_recv": 1.0,  # nccl-tests' sendrecv: each rank's bytes cross one link once
    }
    return factors[operation]


def element_count(operation: str, size_bytes: int, itemsize: int, world_size: int) -> int:
    """Elements of the counted buffer: at least one per rank, a multiple of it where split."""
    count = max(1, size_bytes // itemsize)
    if operation in SPLIT_OPERATIONS:
        count = max(world_size, count - count % world_size)
    return count


def size_notices(operations, sizes, dtype: str, itemsize: int, world_size: int) -> list[str]:
    """One line per requested size that some operation measures at other bytes, saying which."""
    lines = []
    for size in sizes:
        measured: dict[int, list[str]] = {}
        for operation in operations:
            actual = element_count(operation, size, itemsize, world_size) * itemsize
            if actual != size:
                measured.setdefault(actual, []).append(operation)
        if measured:
            parts = " and as ".join(f"{b} B for {', '.join(ops)}" for b, ops in measured.items())
            lines.append(
                f"mtb comm: size {size} B is measured as {parts} (whole {dtype} elements, at "
                f"least one per rank, a multiple of {world_size} ranks where the operation "
                "splits the buffer)"
            )
    return lines


def algbw_gbps(size_bytes: int, time_us: float) -> float:
    """Bytes over time, in GB/s (10^9 bytes per second, as nccl-tests prints)."""
    return size_bytes / (time_us * 1e-6) / 1e9


def busbw_gbps(operation: str, size_bytes: int, time_us: float, world_size: int) -> float:
    return algbw_gbps(size_bytes, time_us) * bus_factor(operation, world_size)
