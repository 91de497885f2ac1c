"""Exact model-state bytes a DeepSpeed ZeRO rank holds, read from its buffers.

DeepSpeed keeps parameters, gradient partitions and fp32 master weights in
its own flat buffers rather than in ``param.grad`` and the torch optimizer,
so the generic count in mtb.engine would miss them. Each tensor is counted
once (by storage), and only what this rank holds.
"""

import torch


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _bytes(tensors, seen: set) -> int:
    total = 0
    for tensor in tensors:
        if tensor is None or tensor.numel() == 0:
            continue
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.numel())
        if key in seen:
            continue
        seen.add(key)
        total += tensor.numel() * tensor.element_size()
    return total


def _parameters(module, stage: int):
    for param in module.parameters():
        if stage < 3:
            yield param
            continue
        yield param.ds_tensor
        if getattr(param, "ds_persist", False):
            yield param.data


def zero_state_bytes(ds_engine, stage: int):
    from mtb.api import ModelStateBytes

    optimizer = ds_engine.optimizer
    if stage < 3:
        local = [p.grad for p in ds_engine.module.parameters() if p.grad is not None]
        grads = _tensors([local, getattr(optimizer, "averaged_gradients", {})])
        master = _tensors(optimizer.single_partition_of_fp32_groups)
    else:
        grads = _tensors(getattr(optimizer, "grad_partitions_flat_buffer", None))
        master = _tensors(optimizer.fp32_partitioned_groups_flat)
    seen: set = set()
    parameters = _bytes(_parameters(ds_engine.module, stage), seen)
    inner = _tensors(list(optimizer.optimizer.state.values()))
    return ModelStateBytes(
        parameters=parameters,
        gradients=_bytes(grads, seen),
        optimizer_state=_bytes(master, seen) + _bytes(inner, seen),
    )
