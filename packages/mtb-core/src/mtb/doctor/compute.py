"""Measured peak matmul throughput of this node's device.

On CPU this is ``mtb run``'s MFU calibration on its smallest shape (a run
times its model's largest linear layer, when larger, the same way); on a
GPU it is a bf16 matmul, a ceiling to compare with the datasheet peak that
MFU uses.
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

    from mtb import calibration

    started = time.perf_counter()
    if torch.cuda.is_available():
        flops, how = gpu_matmul_flops(), f"bf16 matmul on {torch.cuda.get_device_name()}"
    else:
        flops = calibration.measure(calibration.FLOOR)["flops"]
        how = "fp32 matmul on the CPU (the smallest MFU calibration on CPU)"
    details = {"flops": flops, "method": how, "seconds": time.perf_counter() - started}
    message = f"{flops / 1e12:.3f} TFLOP/s, {how}"
    return Check(name="matmul_peak", area=AREA, status=OK, message=message, details=details)


def checks() -> list[Check]:
    return [peak()]
