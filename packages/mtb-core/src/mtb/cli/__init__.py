"""The ``mtb`` command line: a click group built from a plugin manager.

``make_cli(pm)`` builds a fresh group so tests can drive the CLI over a
plugin manager of their own; ``main`` uses the process-wide one. Every
command, core's own included (mtb.cli.commands), comes from a plugin's
``mtb_register_commands``.
"""

import os
import sys

import click

from mtb.errors import MtbError

#: set by torchrun's agent in each worker it starts
TORCHRUN_WORKER = "TORCHELASTIC_RUN_ID"


class MtbGroup(click.Group):
    """Turns MtbError into one line on stderr and its exit code (never a traceback).

    Remembers which plugin added each command (``command_plugins``), for ``mtb plugins``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.command_plugins: dict[str, str | None] = {}
        self.adding_plugin: str | None = None

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(cmd, name)
        self.command_plugins[name or cmd.name or ""] = self.adding_plugin

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except MtbError as error:
            click.echo(f"Error: {error}", err=True)
            ctx.exit(error.exit_code)


def make_cli(pm) -> MtbGroup:
    from mtb import __version__

    @click.group(cls=MtbGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(
        __version__, "--version", package_name="mtb-core", message="mtb %(version)s"
    )
    @click.pass_context
    def cli(ctx):
        """MiniTrainBench: benchmark distributed training of GPT-like models.

        Exit codes: 0 ok, 1 run failed, 2 usage or configuration error, 128+N stopped
        by signal N (130 Ctrl-C, 143 SIGTERM; 138 SIGUSR1 after a save with
        --save-on-signal).
        """
        ctx.obj = pm

    register_commands(pm, cli)
    return cli


def register_commands(pm, cli: MtbGroup) -> None:
    """Each plugin adds its commands; one whose hook raises leaves none behind."""
    from mtb.registry import call_each

    before: dict = {}

    def arguments(plugin: str) -> dict:
        before.clear()
        before.update(cli.commands)
        cli.adding_plugin = plugin
        return {"cli": cli, "pm": pm}

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
    if TORCHRUN_WORKER in os.environ:  # ``torchrun -m mtb``: leave as launched workers do
        from mtb.launch import entry

        entry(lambda: exit_code(cli))
    cli(prog_name="mtb")


def exit_code(cli: click.Group) -> int:
    """The exit status of one CLI call, for a caller that must leave by ``os._exit``."""
    try:
        cli(prog_name="mtb")
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    return 0
