"""The ``plan`` plugin (entry point ``mtb = plan``): adds ``mtb plan``.

The command imports torch inside its body, never here, so ``mtb --help``
stays fast.
"""

from mtb.api import hookimpl


@hookimpl
def mtb_register_commands(cli):
    from mtb_plan.cli import plan_command

    cli.add_command(plan_command)
