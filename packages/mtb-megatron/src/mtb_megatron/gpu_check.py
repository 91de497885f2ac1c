"""A megatron-core GPT (TP1/PP1) forward and backward on one GPU.

Run as ``python -m mtb_megatron.gpu_check``.

The smallest real check that the installed megatron-core trains on this
machine's GPU: one rank, one NCCL group, a 2-layer GPT from megatron-core's
local (non-Transformer-Engine) layer spec, one forward with labels, one
backward. Prints one JSON line (loss, gradient norm, peak CUDA memory, time)
and exits 0 when the loss and every gradient are finite, 1 otherwise, 2
without a GPU or megatron-core. Megatron's GPTModel cannot run on the CPU.
"""

import json
import sys
import time

SHAPE = {"num_layers": 2, "hidden_size": 128, "num_attention_heads": 4}
VOCAB, SEQ, BATCH = 1024, 64, 2


def init_parallel(backend: str, device=None) -> None:
    """A one-rank process group (no port needed) and megatron-core's TP1/PP1 parallel state."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    store = dist.HashStore()
    dist.init_process_group(backend, store=store, rank=0, world_size=1, device_id=device)
    parallel_state.initialize_model_parallel(1, 1)


def build_model(dtype):
    """A TP1/PP1 GPTModel from megatron-core's local spec (after :func:`init_parallel`)."""
    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        **SHAPE,
        use_cpu_initialization=True,
        pipeline_dtype=dtype,
        params_dtype=dtype,
        bf16=dtype == torch.bfloat16,
    )
    return GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=VOCAB,
        max_sequence_length=SEQ,
    )


def step(model, device) -> dict:
    """One forward with labels and one backward; the loss and the gradients' health."""
    import torch

    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    positions = torch.arange(SEQ, device=device).unsqueeze(0).expand(BATCH, -1)
    mask = torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool, device=device).tril().logical_not()
    started = time.perf_counter()
    losses = model(inputs, positions, mask, labels=labels)
    loss = losses.float().mean()
    loss.backward()
    torch.cuda.synchronize(device)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads])).item()
    return {
        "loss": loss.item(),
        "grad_norm": norm,
        "parameters_with_grad": len(grads),
        "parameters": sum(1 for _ in model.parameters()),
        "all_finite": bool(torch.isfinite(loss)) and all(torch.isfinite(g).all() for g in grads),
        "forward_backward_ms": (time.perf_counter() - started) * 1e3,
        "cuda_max_allocated_bytes": torch.cuda.max_memory_allocated(device),
    }


def _refuse(message: str) -> int:
    print(f"Error: {message}", file=sys.stderr)
    return 2


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        return _refuse("the GPU check needs a CUDA GPU (megatron-core's GPTModel needs CUDA)")
    try:
        import megatron.core
    except ImportError:
        return _refuse("megatron-core is not installed: pip install 'mtb-megatron[megatron-core]'")
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    init_parallel("nccl", device)
    torch.manual_seed(1234)
    model_parallel_cuda_manual_seed(1234)
    model = build_model(torch.bfloat16).to(device)
    result = {
        "megatron_core": megatron.core.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(device),
        **step(model, device),
    }
    print(json.dumps(result), flush=True)
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()
    return 0 if result["all_finite"] else 1


if __name__ == "__main__":
    sys.exit(main())
