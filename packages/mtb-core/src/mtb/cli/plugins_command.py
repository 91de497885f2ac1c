"""``mtb plugins``: what is installed, who provides it, and what is unavailable."""

import json
import sys

import click

from mtb.registry import KINDS


def describe(pm) -> list[dict]:
    """One entry per plugin: distribution, version, hooks and registered names."""
    registries = {kind: pm.registry(kind) for kind in KINDS}
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
        entries.append(
            {
                "name": name,
                "distribution": info.distribution,
                "version": info.version,
                "builtin": info.builtin,
                "hooks": hooks,
                "registers": registers,
            }
        )
    return entries


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
        f"{item['name']}: {item['unavailable_reason']}"
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
    entries = describe(pm)
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    from rich.table import Table

    from mtb.console import plain_console

    table = Table(title="mtb plugins")
    for column in ("plugin", "distribution", "version", "hooks", "registers"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        cells = (
            entry["name"],
            entry["distribution"],
            entry["version"],
            "\n".join(entry["hooks"]) or "-",
            _registers_text(entry["registers"]),
        )
        table.add_row(*cells)
    console = plain_console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    for line in _unavailable(entries):
        console.print(f"unavailable: {line}")
