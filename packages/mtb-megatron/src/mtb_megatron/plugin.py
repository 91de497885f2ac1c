"""The ``megatron`` plugin (entry point ``mtb = megatron``).

It implements no hooks yet. Its issue adds ``mtb_register_commands`` with
``mtb megatron ...``: tensor/pipeline/data-parallel layouts for a model
and world size, and, with the ``[megatron-core]`` extra installed, checks
of those layouts against Megatron-Core's own parallel-state set-up.

megatron-core and torch are imported inside command bodies, never here.
"""
