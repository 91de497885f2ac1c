"""Measured peak matmul throughput of this node's device.

On CPU this is the figure ``mtb run`` divides by for MFU (the same
measurement); on a GPU it is a bf16 matmul, a ceiling to compare with the
datasheet peak that MFU uses.
"""

import time

from mtb.doctor.check import OK, Check

AREA = "compute"


def gpu_matmul_flops(size: int = 8192, repeats: int = 10) -> float:
    """Best-of-N FLOP/s of a bf16 square matmul on the current GPU (CUDA events)."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 2 * size**3 / best


def peak() -> Check:
    import torch

    from mtb.metrics import measure_cpu_matmul_flops

    started = time.perf_counter()
    if torch.cuda.is_available():
        flops, how = gpu_matmul_flops(), f"bf16 matmul on {torch.cuda.get_device_name()}"
    else:
        flops, how = measure_cpu_matmul_flops(), "fp32 matmul on the CPU (the MFU peak on CPU)"
    details = {"flops": flops, "method": how, "seconds": time.perf_counter() - started}
    message = f"{flops / 1e12:.3f} TFLOP/s, {how}"
    return Check(name="matmul_peak", area=AREA, status=OK, message=message, details=details)


def checks() -> list[Check]:
    return [peak()]
