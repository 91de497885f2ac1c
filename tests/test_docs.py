"""Every hookspec is in the plugin author guide; every CLI command is in the CLI docs."""

import inspect

import click
from conftest import ROOT

from mtb import hookspecs
from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager


def hook_names() -> list[str]:
    return [
        name
        for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("mtb_")
    ]


def command_paths(group: click.Group, prefix: str = "mtb") -> list[str]:
    paths = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            paths += command_paths(command, f"{prefix} {name}")
        else:
            paths.append(f"{prefix} {name}")
    return paths


def test_every_hookspec_has_a_docstring_and_a_section_in_the_guide():
    guide = (ROOT / "docs" / "plugin-authors.md").read_text()
    names = hook_names()
    assert len(names) >= 9
    for name in names:
        assert inspect.getdoc(getattr(hookspecs, name)), name
        assert f"`{name}`" in guide, f"{name} is missing from docs/plugin-authors.md"


def test_every_command_of_the_installed_cli_is_documented():
    docs = (ROOT / "docs" / "cli.md").read_text()
    cli = make_cli(build_plugin_manager())
    for path in command_paths(cli):
        assert f"`{path}`" in docs, f"{path} is missing from docs/cli.md"
        command = cli
        for part in path.split()[1:]:
            command = command.commands[part]
        assert command.help, f"{path} has no help text"
