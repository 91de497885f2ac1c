"""Tensor-parallel collectives counted as torch dispatches them, not derived from the plan.

DTensor redistributes activations with functional collectives
(``_c10d_functional``) whose last argument names their process group; a
dispatch mode active around forward and backward sees each one and counts
those on the tensor-parallel group (FSDP's and the trainer's go elsewhere).
"""

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode

NAMESPACE = "_c10d_functional"


class CollectiveCounter(TorchDispatchMode):
    """Counts functional collectives on one process group, by kind (all_reduce, ...)."""

    def __init__(self, group_name: str):
        super().__init__()
        self.group_name = group_name
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == NAMESPACE and self.group_name in (*args, *(kwargs or {}).values()):
            self.counts[func._overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))
