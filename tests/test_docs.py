"""Every hookspec is in the plugin author guide; every CLI command is in the CLI docs."""

import inspect
import itertools

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


def guide_section(guide: str, name: str) -> str:
    start = guide.index(f"### `{name}`")
    end = guide.find("\n## ", start)
    following = guide.find("\n### ", start + 1)
    ends = [e for e in (end, following) if e != -1]
    return guide[start : min(ends) if ends else len(guide)]


def test_every_hookspec_argument_is_named_in_its_section_of_the_guide():
    guide = (ROOT / "docs" / "plugin-authors.md").read_text()
    for name in hook_names():
        section = guide_section(guide, name)
        for argument in inspect.signature(getattr(hookspecs, name)).parameters:
            assert f"`{argument}" in section, f"{name}: argument {argument} is not described"


def test_every_command_of_the_installed_cli_is_documented():
    docs = (ROOT / "docs" / "cli.md").read_text()
    cli = make_cli(build_plugin_manager())
    for path in command_paths(cli):
        assert f"`{path}`" in docs, f"{path} is missing from docs/cli.md"
        command = cli
        for part in path.split()[1:]:
            command = command.commands[part]
        assert command.help, f"{path} has no help text"


def test_the_cli_reference_is_generated_from_the_installed_commands():
    from mtb.cli.reference import render

    page = (ROOT / "docs" / "cli-reference.md").read_text()
    assert page == render(make_cli(build_plugin_manager())), (
        "docs/cli-reference.md is stale: python -m mtb.cli.reference > docs/cli-reference.md"
    )


#: concept notes and the commands that demonstrate them (a plugin's command only when installed)
CONCEPT_NOTES = {
    "tp": "docs/parallelism.md",
    "moe": "docs/moe.md",
    "doctor": "docs/multi-node.md",
    "megatron": "docs/parallelism.md",
}


def test_concept_notes_exist_and_their_commands_link_them():
    cli = make_cli(build_plugin_manager())
    for name, note in CONCEPT_NOTES.items():
        assert (ROOT / note).is_file(), note
        if name in cli.commands:
            assert note in cli.commands[name].help, f"mtb {name} --help does not name {note}"
    assert set(CONCEPT_NOTES) - {"megatron"} <= set(cli.commands)


def estimate_table() -> list[list[str]]:
    """The rows of metrics.md's bytes-per-parameter table, as cells."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    start = text.index("<!-- estimate-bytes-table")
    lines = text[start:].splitlines()[3:]
    rows = [line for line in itertools.takewhile(lambda line: line.startswith("|"), lines)]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_the_documented_estimate_bytes_are_the_strategies_own():
    from mtb.config import TrainingConfig

    strategies = {entry.name: entry.item for entry in build_plugin_manager().registry("strategy")}
    documented = set()
    for names, precisions, params, grads, optimizer, sharded in estimate_table():
        for name, precision in itertools.product(names.split(", "), precisions.split(", ")):
            strategy = strategies[name]
            training = TrainingConfig(precision=precision, optimizer="adamw")
            assert strategy.state_bytes_per_parameter(training) == {
                "parameters": int(params),
                "gradients": int(grads),
                "optimizer_state": int(optimizer),
            }, (name, precision)
            states = {s.replace("_", " ") for s in strategy.sharded_states} or {"none"}
            assert states == set(sharded.split(", ")), name
            documented.add(name)
    assert documented == {"single", "ddp", "fsdp", "zero1", "zero2", "zero3"}
