"""Operator microbenchmarks, run on every rank of a launch at once.

The ranks of one node share its cores (CPU) or its power and memory system
(GPU), so a rank's throughput depends on how many ranks run beside it: all
ranks time the same operators at the same moment, and the slowest rank's
figure is kept (a step is as slow as its slowest rank). Each timing is the
median of ``repeats`` samples; a sample repeats a fast call until it lasts
``MIN_SAMPLE_S`` so that the clock's resolution does not decide the figure.
"""

import statistics
import time

import attrs

from mtb.api import LaunchConfig

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
MIN_SAMPLE_S = 0.005
#: AdamW bytes counted per parameter: the fp32 parameter, its gradient and the two moments
OPTIMIZER_BYTES_PER_PARAM = 16
#: the flat parameter the optimizer is timed on is capped (its rate does not depend on size
#: beyond a few MB, and a large preset's full state would not fit beside N ranks)
OPTIMIZER_MAX_PARAMS = 2**25


@attrs.frozen(kw_only=True)
class ComputeSpec:
    """What each rank measures: the workload's GEMM shapes and activation sizes."""

    launch: LaunchConfig
    gemms: tuple[tuple[str, int, int, int], ...]  # (name, m, k, n), every micro-batch
    activations: tuple[tuple[int, int, int], ...]  # (tokens, d_model, mlp hidden) per micro-batch
    attention: tuple[tuple[int, int, int, int, float], ...]  # (b, heads, seq, head_dim, flops)
    parameters: int
    precision: str
    threads: int | None
    repeats: int = 5


def _sync(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def seconds_per_call(device, repeats: int, call, *args, **kwargs) -> float:
    """Median seconds of one ``call(*args, **kwargs)`` over ``repeats`` samples, after a warm-up."""
    call(*args, **kwargs)
    _sync(device)
    start = time.perf_counter()
    call(*args, **kwargs)
    _sync(device)
    inner = max(1, int(MIN_SAMPLE_S / max(time.perf_counter() - start, 1e-9)))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            call(*args, **kwargs)
        _sync(device)
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def matmul(spec: ComputeSpec, device, dtype) -> dict:
    """FLOP/s of the forward GEMM (``linear``) and the two backward ones, FLOP-weighted."""
    import torch
    import torch.nn.functional as F

    flops = forward_s = backward_s = 0.0
    for _, m, k, n in spec.gemms:
        x = torch.randn(m, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype)
        dy = torch.randn(m, n, device=device, dtype=dtype)
        forward_s += seconds_per_call(device, spec.repeats, F.linear, x, w)
        backward_s += seconds_per_call(device, spec.repeats, torch.matmul, dy, w)  # input grad
        backward_s += seconds_per_call(device, spec.repeats, torch.matmul, dy.t(), x)  # weight
        flops += 2 * m * k * n
    return {
        "matmul_flops_per_s": flops / forward_s,
        "matmul_backward_flops_per_s": 2 * flops / backward_s,
    }


def elementwise(spec: ComputeSpec, device, dtype) -> dict:
    """Bytes/s of layer_norm and add on the hidden states and gelu on the MLP's width."""
    import torch
    import torch.nn.functional as F

    moved = elapsed = 0.0
    for tokens, d, hidden in spec.activations:
        x = torch.randn(tokens, d, device=device, dtype=dtype)
        y = torch.randn(tokens, d, device=device, dtype=dtype)
        h = torch.randn(tokens, hidden, device=device, dtype=dtype)
        weight = torch.ones(d, device=device, dtype=dtype)
        bias = torch.zeros(d, device=device, dtype=dtype)
        elapsed += seconds_per_call(device, spec.repeats, F.layer_norm, x, (d,), weight, bias)
        elapsed += seconds_per_call(device, spec.repeats, F.gelu, h)
        elapsed += seconds_per_call(device, spec.repeats, torch.add, x, y)
        moved += 2 * x.nbytes + 2 * h.nbytes + 3 * x.nbytes  # bytes read + written by each
    return {"elementwise_bytes_per_s": moved / elapsed}


def _backward(out, inputs, grad):
    import torch

    return torch.autograd.grad(out, inputs, grad, retain_graph=True)


def attention(spec: ComputeSpec, device, dtype) -> dict:
    """FLOP/s of causal scaled-dot-product attention, forward and backward (2x the FLOPs)."""
    import torch
    import torch.nn.functional as F

    sdpa = F.scaled_dot_product_attention
    flops = forward_s = backward_s = 0.0
    for b, heads, seq, head_dim, causal_flops in spec.attention:
        qkv = [
            torch.randn(b, heads, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
            for _ in range(3)
        ]
        forward_s += seconds_per_call(device, spec.repeats, sdpa, *qkv, is_causal=True)
        out = sdpa(*qkv, is_causal=True)
        grad = torch.randn_like(out)
        backward_s += seconds_per_call(device, spec.repeats, _backward, out, qkv, grad)
        flops += causal_flops
    return {
        "attention_flops_per_s": flops / forward_s,
        "attention_backward_flops_per_s": 2 * flops / backward_s,
    }


def op_overhead(spec: ComputeSpec, device) -> dict:
    """Seconds of one call of a one-element add: dispatch (and launch on GPU), no work."""
    import torch

    x = torch.ones(1, device=device)
    return {"op_overhead_s": seconds_per_call(device, spec.repeats, torch.add, x, x)}


def optimizer(spec: ComputeSpec, device) -> dict:
    """Bytes/s of an AdamW step on one flat fp32 parameter, 16 bytes counted per parameter."""
    import torch

    count = min(spec.parameters, OPTIMIZER_MAX_PARAMS)
    param = torch.nn.Parameter(torch.randn(count, device=device))
    param.grad = torch.randn_like(param)
    step = torch.optim.AdamW([param], lr=1e-4).step
    seconds = seconds_per_call(device, spec.repeats, step)
    return {"optimizer_bytes_per_s": count * OPTIMIZER_BYTES_PER_PARAM / seconds}


def measure(spec: ComputeSpec, device) -> dict:
    """Every figure on this rank, the figure name -> value."""
    import torch

    dtype = getattr(torch, DTYPES[spec.precision])
    with torch.no_grad():
        figures = {
            **matmul(spec, device, dtype),
            **elementwise(spec, device, dtype),
            **op_overhead(spec, device),
            **optimizer(spec, device),
        }
    return {**figures, **attention(spec, device, dtype)}


def slowest(per_rank: list[dict]) -> dict:
    """The slowest rank's figure of each kind: least throughput, most overhead and memory."""
    worst = {"op_overhead_s": max}
    return {key: worst.get(key, min)(r[key] for r in per_rank) for key in per_rank[0]}


def rank_main(spec: ComputeSpec) -> dict | None:
    """The launched worker: join the group, measure with the others, then rank 0 alone."""
    import torch

    from mtb.api import distributed

    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    context = distributed.setup(spec)
    distributed.barrier(context)
    figures = measure(spec, context.device)
    gathered = distributed.gather(context, figures)
    alone = solo_speedup(spec, context, figures)
    distributed.teardown(context)
    return {**slowest(gathered), "solo_speedup": alone} if context.is_main else None


def solo_speedup(spec: ComputeSpec, context, together: dict) -> float:
    """How much faster rank 0's GEMMs run while the node's other ranks wait (1 for one rank).

    Ranks that share cores slow each other down; a pipeline's fill and drain
    leave some of them idle, and the step model credits the busy ones with
    this speed-up.
    """
    import torch

    from mtb.api import distributed

    if context.world_size == 1:
        return 1.0
    alone = 0.0
    if context.is_main:
        dtype = getattr(torch, DTYPES[spec.precision])
        with torch.no_grad():
            alone = matmul(spec, context.device, dtype)["matmul_flops_per_s"]
    distributed.barrier(context)
    return max(1.0, alone / together["matmul_flops_per_s"]) if context.is_main else 1.0
