"""docs/cli-reference.md: every command's ``--help``, generated from the click objects.

``python -m mtb.cli.reference > docs/cli-reference.md`` rewrites it with the
plugins installed in this environment; a test fails when the file and the
commands drift apart. The page is generated at a fixed width so that it does
not depend on the terminal.
"""

import click

WIDTH = 100
HEADER = """# `mtb` command reference

Generated from the commands' own help with every first-party package
installed (`python -m mtb.cli.reference > docs/cli-reference.md`); do not
edit by hand. [cli.md](cli.md) explains the commands with examples.
"""


def commands(group: click.Group, path: tuple[str, ...] = ("mtb",)):
    """(path, command) for the group and everything under it, depth first, sorted by name."""
    yield path, group
    for name in sorted(group.commands):
        command = group.commands[name]
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def help_text(command: click.Command, path: tuple[str, ...], help_names) -> str:
    """The help a user gets: contexts up the chain give the full usage line, and the root's
    help option names (``-h`` beside ``--help``) reach every command as when it is invoked."""
    parent = None
    for name in path[:-1]:
        parent = click.Context(
            click.Command(name), info_name=name, parent=parent, help_option_names=help_names
        )
    context = click.Context(
        command,
        info_name=path[-1],
        parent=parent,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
        help_option_names=help_names,
    )
    return command.get_help(context)


def render(cli: click.Group) -> str:
    sections = [HEADER]
    help_names = cli.context_settings.get("help_option_names")
    for path, command in commands(cli):
        title = " ".join(path)
        text = help_text(command, path, help_names)
        sections.append(f"## `{title}`\n\n```text\n{text}\n```\n")
    return "\n".join(sections)


def main() -> None:
    from mtb.cli import make_cli
    from mtb.plugins import get_plugin_manager

    print(render(make_cli(get_plugin_manager())), end="")


if __name__ == "__main__":
    main()
