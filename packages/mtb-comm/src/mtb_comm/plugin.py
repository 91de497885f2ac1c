"""The ``comm`` plugin (entry point ``mtb = comm``).

It implements no hooks yet. Its issue adds ``mtb_register_commands`` with
``mtb comm`` (collective bandwidth, nccl-tests conventions: algbw, busbw,
correctness checks), ``mtb tp ...`` (tensor-parallel layers) and
``mtb moe ...`` (all-to-all expert dispatch).

Commands import torch inside their bodies, never here, so ``mtb --help``
stays fast.
"""
