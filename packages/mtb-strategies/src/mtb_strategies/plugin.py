"""The ``strategies`` plugin (entry point ``mtb = strategies``).

It implements no hooks yet. Its issue adds:

- ``mtb_register_strategies``: ``ddp`` and ``fsdp`` (torch.distributed) and
  ``zero1``/``zero2``/``zero3`` (DeepSpeed), the latter registered even when
  DeepSpeed is missing, marked unavailable with the hint
  ``pip install mtb-strategies[deepspeed]``;
- ``mtb_register_checkpoint_backends``: a DeepSpeed checkpoint backend.

torch and deepspeed are imported inside ``Strategy.setup``, never here.
"""
