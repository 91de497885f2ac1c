"""The CPU peak MFU divides by: the best matmul rate this rank's own threads reach.

A peak measured on a smaller matmul than the model's, or in a single noisy
moment, can fall below what the training's matmuls reach, and MFU then
exceeds 100 %. So the peak is timed on the model's largest linear layer (its
forward, input-gradient and weight-gradient GEMMs, in the layouts autograd
uses), never smaller in FLOPs than a 1024 x 1024 x 1024 matmul, on the
threads and in the dtype the rank trains with, best of a few round-robin
rounds within a time budget; the result records how.
"""

import math
import time

#: (m, k, n) of the smallest matmul the peak is measured on
FLOOR = (1024, 1024, 1024)
ROUNDS = 3
#: rounds after the first stop once this much time is spent
BUDGET_S = 1.0


def gemms(largest: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """(m, k, n) of the forward, input-gradient and weight-gradient GEMMs of a linear layer.

    ``largest`` is (tokens, in features, out features); a layer smaller in
    FLOPs than :data:`FLOOR` is replaced by it.
    """
    if math.prod(largest) < math.prod(FLOOR):
        largest = FLOOR
    tokens, inputs, outputs = largest
    return [(tokens, inputs, outputs), (tokens, outputs, inputs), (outputs, tokens, inputs)]


def _operations(largest: tuple[int, int, int], dtype):
    """The three GEMMs as callables on shared operands: y = x w^T, dx = dy w, dw = dy^T x."""
    import torch

    tokens, inputs, outputs = largest
    x, w = torch.randn(tokens, inputs, dtype=dtype), torch.randn(outputs, inputs, dtype=dtype)
    dy = torch.randn(tokens, outputs, dtype=dtype)
    return [lambda: x @ w.t(), lambda: dy @ w, lambda: dy.t() @ x]


def measure(largest: tuple[int, int, int], dtype_name: str = "fp32") -> dict:
    """Best FLOP/s over the GEMMs of ``largest`` and how it was measured."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    shapes = gemms(largest)
    operations = _operations(shapes[0], dtype)
    started = time.perf_counter()
    operations[0]()  # untimed: allocator and kernel warm-up
    best, rounds = [math.inf] * len(shapes), 0
    while rounds < ROUNDS and (rounds == 0 or time.perf_counter() - started < BUDGET_S):
        for i, operation in enumerate(operations):
            tick = time.perf_counter()
            operation()
            best[i] = min(best[i], time.perf_counter() - tick)
        rounds += 1
    rates = [2 * math.prod(shape) / seconds for shape, seconds in zip(shapes, best, strict=True)]
    return {
        "flops": max(rates),
        "dtype": dtype_name,
        "threads": torch.get_num_threads(),
        "gemms_mkn": [list(shape) for shape in shapes],
        "flops_per_gemm": rates,
        "rounds": rounds,
        "seconds": time.perf_counter() - started,
    }
