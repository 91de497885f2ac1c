"""Activation memory: the bytes autograd keeps alive for backward, at their peak.

Peak RSS and the CUDA allocator's peak mix weights, gradients, optimizer
state and transient buffers; the figure that context and sequence
parallelism change is what the forward pass leaves behind for backward.
``SavedActivations`` counts exactly that through autograd's saved-tensor
hooks: every tensor an op saves (parameters and views of them excluded),
each storage once however many views of it are saved, and the peak of what
is alive at once, so a pipeline schedule that frees a micro-batch's
activations before the next forward is credited for it.

Not seen: tensors a checkpointed block keeps outside autograd (activation
checkpointing recomputes its blocks and saves through hooks of its own), and
anything torch.compile fuses away, so the trainer meters eager steps only.
"""

import threading

import torch
from torch import nn


def _is_parameter(tensor: torch.Tensor) -> bool:
    """A parameter or a view of one (a linear layer saves its weight transposed)."""
    return isinstance(tensor, nn.Parameter) or isinstance(tensor._base, nn.Parameter)


def _storage(tensor: torch.Tensor) -> tuple[int, int]:
    """(key, bytes) of the storage this rank holds: a DTensor's local shard."""
    local = getattr(tensor, "_local_tensor", tensor)
    storage = local.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class _Held:
    """One saved tensor; releasing it (autograd freeing the graph) lowers the live bytes."""

    __slots__ = ("key", "meter", "tensor")

    def __init__(self, meter: "SavedActivations", key: int, tensor: torch.Tensor):
        self.meter, self.key, self.tensor = meter, key, tensor

    def __del__(self):
        self.meter.release(self.key)


class SavedActivations:
    """A context manager: ``peak_bytes`` of saved activations while it was active."""

    def __init__(self) -> None:
        self.peak_bytes = 0
        self.live_bytes = 0
        self._storages: dict[int, list[int]] = {}  # key -> [references, bytes]
        self._lock = threading.Lock()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    def __enter__(self) -> "SavedActivations":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)

    def pack(self, tensor: torch.Tensor):
        if _is_parameter(tensor):
            return tensor
        key, nbytes = _storage(tensor)
        with self._lock:
            held = self._storages.setdefault(key, [0, nbytes])
            held[0] += 1
            if held[0] == 1:
                self.live_bytes += nbytes
                self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        return _Held(self, key, tensor)

    @staticmethod
    def unpack(packed):
        return packed.tensor if isinstance(packed, _Held) else packed

    def release(self, key: int) -> None:
        with self._lock:
            held = self._storages[key]
            held[0] -= 1
            if held[0] == 0:
                self.live_bytes -= held[1]
                del self._storages[key]
