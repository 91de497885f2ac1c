"""Per-iteration timing of one collective: host clock on CPU, CUDA events on GPU.

On CUDA each iteration is bracketed by events recorded on the current
stream and the host synchronises once after the loop, so the timing adds no
host round trip per iteration (the way nccl-tests keeps the launch
pipeline full). gloo's CPU collectives return when complete, so a host clock
around each call is exact.
"""

import time


def _cpu(run, iters: int) -> list[float]:
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e6)
    return times


def _cuda(run, iters: int) -> list[float]:
    import torch

    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(iters)
    ]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e3 for start, end in events]


def time_iterations(run, iters: int, device) -> list[float]:
    """Microseconds of each of ``iters`` calls of ``run``."""
    return _cuda(run, iters) if device.type == "cuda" else _cpu(run, iters)


def warm_up(run, iters: int, device) -> None:
    for _ in range(iters):
        run()
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize()
