"""The ``mtb`` command line: a click group built from a plugin manager.

``make_cli(pm)`` builds a fresh group so tests can drive the CLI over a
plugin manager of their own; ``main`` uses the process-wide one.
"""

import click

from mtb.errors import MtbError


class MtbGroup(click.Group):
    """Turns MtbError into one line on stderr and its exit code (never a traceback)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MtbError as error:
            click.echo(f"Error: {error}", err=True)
            ctx.exit(error.exit_code)


def make_cli(pm) -> click.Group:
    from mtb import __version__
    from mtb.cli.checkpoint_command import checkpoint_group
    from mtb.cli.doctor_command import doctor_command
    from mtb.cli.estimate_command import estimate_command
    from mtb.cli.matrix_command import matrix_group
    from mtb.cli.plugins_command import plugins_command
    from mtb.cli.run_command import build_run_command
    from mtb.fault.command import fault_group

    @click.group(cls=MtbGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(
        __version__, "--version", package_name="mtb-core", message="mtb %(version)s"
    )
    @click.pass_context
    def cli(ctx):
        """MiniTrainBench: benchmark distributed training of GPT-like models.

        Exit codes: 0 ok, 1 run failed, 2 usage or configuration error, 128+N stopped
        by signal N (130 Ctrl-C, 143 SIGTERM).
        """
        ctx.obj = pm

    cli.add_command(build_run_command(pm))
    cli.add_command(build_run_command(pm, "profile"))
    cli.add_command(plugins_command)
    cli.add_command(fault_group)
    cli.add_command(checkpoint_group)
    cli.add_command(doctor_command)
    cli.add_command(matrix_group)
    cli.add_command(estimate_command)
    register_commands(pm, cli)
    return cli


def register_commands(pm, cli: click.Group) -> None:
    """Each plugin adds its commands; one whose hook raises leaves none behind."""
    from mtb.registry import call_each

    before: dict = {}

    def arguments(plugin: str) -> dict:
        before.clear()
        before.update(cli.commands)
        return {"cli": cli}

    def undo(plugin: str) -> None:
        cli.commands = dict(before)

    call_each(pm, "mtb_register_commands", arguments, undo)


def main() -> None:
    from mtb.plugins import get_plugin_manager

    try:
        cli = make_cli(get_plugin_manager())
    except MtbError as error:  # a broken plugin set (strict mode, clashing names)
        click.echo(f"Error: {error}", err=True)
        raise SystemExit(error.exit_code) from None
    cli(prog_name="mtb")
