"""``mtb plugins``: what is installed, who provides it, and what is unavailable."""

import json
import sys

import attrs
import click

from mtb.registry import KINDS


def _command_registry(cli) -> dict[str | None, list]:
    """Plugin -> the commands it added to ``cli`` (none when unknown)."""
    added = getattr(cli, "command_plugins", {})
    by_plugin: dict[str | None, list] = {}
    for name in sorted(getattr(cli, "commands", {})):
        by_plugin.setdefault(added.get(name), []).append(
            {"name": name, "available": True, "unavailable_reason": None}
        )
    return by_plugin


def describe(pm, cli=None) -> list[dict]:
    """One entry per plugin: distribution, version, hooks and registered names.

    ``cli``: the ``mtb`` group, whose commands are listed under the plugin
    that added each. Plugins that are not in use follow, with their
    ``status`` (failed, disabled, skipped) and the ``reason``.
    """
    registries = pm.registries()
    commands = _command_registry(cli)
    entries = []
    for name, plugin in pm.list_name_plugin():
        info = pm.info(name)
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [])
        registers = {}
        for kind, registry in registries.items():
            items = [entry for entry in registry if entry.plugin == name]
            if items:
                registers[KINDS[kind].label] = [
                    {
                        "name": e.name,
                        "available": e.unavailable_reason is None,
                        "unavailable_reason": e.unavailable_reason,
                    }
                    for e in items
                ]
        if name in commands:
            registers["commands"] = commands[name]
        entries.append(
            {
                "name": name,
                "distribution": info.distribution,
                "version": info.version,
                "builtin": info.builtin,
                "status": "loaded",
                "reason": None,
                "warnings": pm.warnings.get(name, []),
                "hooks": hooks,
                "registers": registers,
            }
        )
    return entries + [_not_in_use(failure) for failure in pm.failures]


def _not_in_use(failure) -> dict:
    return {
        **attrs.asdict(failure.info),
        "status": failure.status,
        "reason": failure.reason,
        "warnings": [],
        "hooks": [],
        "registers": {},
    }


def _registers_text(registers: dict) -> str:
    lines = []
    for label, items in registers.items():
        names = ", ".join(
            i["name"] if i["available"] else f"{i['name']} (unavailable)" for i in items
        )
        lines.append(f"{label}: {names}")
    return "\n".join(lines) or "-"


def _unavailable(entries: list[dict]) -> list[str]:
    return [
        f"unavailable: {item['name']}: {item['unavailable_reason']}"
        for entry in entries
        for items in entry["registers"].values()
        for item in items
        if not item["available"]
    ]


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.pass_obj
def plugins_command(pm, as_json):
    """List loaded plugins, the hooks they implement and the names they register."""
    entries = describe(pm, click.get_current_context().find_root().command)
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    from rich.table import Table

    from mtb.console import plain_console

    table = Table(title="mtb plugins")
    for column in ("plugin", "distribution", "version", "status", "hooks", "registers"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        cells = (
            entry["name"],
            entry["distribution"],
            entry["version"],
            entry["status"],
            "\n".join(entry["hooks"]) or "-",
            _registers_text(entry["registers"]),
        )
        table.add_row(*cells)
    console = plain_console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    for line in _unavailable(entries) + _problems(entries):
        console.print(line)


def _problems(entries: list[dict]) -> list[str]:
    """Why a plugin is not in use, and what is wrong with one that is."""
    lines = [f"{e['status']}: {e['name']}: {e['reason']}" for e in entries if e["reason"]]
    return lines + [f"warning: {e['name']}: {w}" for e in entries for w in e["warnings"]]
