"""The ``megatron`` plugin (entry point ``mtb = megatron``): adds ``mtb megatron ...``.

``run`` and ``matrix`` launch a pinned Megatron-LM checkout's pretrain_gpt.py;
``topology`` checks megatron-core's parallel groups on CPU ranks (with the
``[megatron-core]`` extra). torch and megatron-core are imported inside
command bodies, never here, so ``mtb --help`` stays fast.
"""

from mtb.api import hookimpl


@hookimpl
def mtb_register_commands(cli):
    from mtb_megatron.cli import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)
