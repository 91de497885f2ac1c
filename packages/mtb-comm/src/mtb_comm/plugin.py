"""The ``comm`` plugin (entry point ``mtb = comm``): adds ``mtb comm``, ``mtb tp``, ``mtb moe``.

Commands import torch inside their bodies, never here, so ``mtb --help``
stays fast.
"""

from mtb.api import hookimpl


@hookimpl
def mtb_register_commands(cli):
    from mtb_comm.cli import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)
