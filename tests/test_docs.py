"""Every hookspec is in the plugin author guide, whose snippets run and import only
mtb.api; every CLI command is in the CLI docs."""

import ast
import inspect
import itertools
import re

import click
import pytest
from conftest import ROOT

from mtb import api, hookspecs
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
    assert documented == {"single", "ddp", "fsdp", "nd", "zero1", "zero2", "zero3"}


#: the guide's only block that is not a program: the trainer's loop, shown as pseudo-code
#: the guide's sketches of the trainer's step and Engine.forward_backward's loop (not runnable)
TRAINER_LOOP = ("batches = [data.batch(step, micro)", "for micro, batch in enumerate(batches):")
#: a hook's signature as the guide states it: ``@hookimpl`` over ``def hook(args): ...``
HOOK_STUB = re.compile(r"^@hookimpl\ndef \w+\([^)]*\): \.\.\.\n$")
REGISTERED_TYPES = {
    "mtb_register_strategies": "Strategy",
    "mtb_register_checkpoint_backends": "CheckpointBackend",
    "mtb_register_profilers": "Profiler",
    "mtb_register_reporters": "Reporter",
}


def guide_snippets() -> list[str]:
    guide = (ROOT / "docs" / "plugin-authors.md").read_text()
    return re.findall(r"```python\n(.*?)```", guide, re.S)


def mtb_imports(snippet: str) -> list[tuple[str, str]]:
    """(module, name) of every import of an ``mtb`` module in a snippet."""
    found = []
    for node in ast.walk(ast.parse(snippet)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "mtb":
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.split(".")[0] == "mtb"]
    return found


def test_the_guide_imports_only_what_mtb_api_exports():
    """A plugin imports mtb.api alone (its tests also mtb.testing), as the guide says."""
    imports = [pair for snippet in guide_snippets() for pair in mtb_imports(snippet)]
    assert ("mtb.api", "Strategy") in imports
    for module, name in imports:
        assert module in {"mtb.api", "mtb.testing"}, f"the guide imports {module}"
        if module == "mtb.api":
            assert name in api.__all__, f"the guide imports {name}, not in mtb.api.__all__"


def test_the_guide_snippets_run_and_register_what_their_kind_expects():
    snippets = [s for s in guide_snippets() if not s.startswith(TRAINER_LOOP)]
    namespaces = []
    for snippet in snippets:
        # a hook's signature stub shows bare ``@hookimpl``; every other snippet imports
        # what it uses, so it runs as it is
        namespace = {"hookimpl": api.hookimpl} if HOOK_STUB.match(snippet) else {}
        exec(compile(snippet, "plugin-authors.md", "exec"), namespace)
        namespaces.append(namespace)
    defined = {k: v for ns in namespaces for k, v in ns.items() if isinstance(v, type)}
    registered = 0
    for namespace in namespaces:
        for hook, kind in REGISTERED_TYPES.items():
            if hook in namespace:
                items = []
                namespace.update({k: v for k, v in defined.items() if k not in namespace})
                namespace[hook](items.append)
                # the hookspec stubs (``def hook(register): ...``) register nothing
                assert all(isinstance(i, getattr(api, kind)) for i in items), hook
                registered += len(items)
    assert registered >= 6


@pytest.mark.timeout(240)
def test_the_guide_plain_strategy_and_tps_reporter_run(tmp_path, monkeypatch):
    """The guide's first strategy trains and its configurable reporter renders that run."""
    snippets = guide_snippets()
    strategy = next(s for s in snippets if "class PlainStrategy" in s)
    reporter = next(s for s in snippets if "class TokensPerSecond(Reporter)" in s)
    (tmp_path / "guide_plugin.py").write_text(strategy + "\n\n" + reporter)
    monkeypatch.syspath_prepend(str(tmp_path))
    runner = api.PluginRunner("guide_plugin", tmp_path / "runs", monkeypatch)
    report = tmp_path / "tps.txt"
    tiny = ["--preset", "tiny", "--steps", "2", "--warmup-steps", "1"]
    run = runner.run("--strategy", "plain", *tiny, "--report", f"tps:{report}", "--tps-digits", "3")
    assert run.exit_code == 0, run.output
    assert run.document["components"]["strategy"]["plugin"] == "guide_plugin"
    tokens = run.document["summary"]["tokens_per_s"]["mean"]
    assert report.read_text() == f"{tokens:.3f}\n"


def test_every_slurm_setting_is_in_the_slurm_guide():
    import attrs

    from mtb.slurm.settings import SlurmSettings

    guide = (ROOT / "docs" / "slurm.md").read_text()
    for field in attrs.fields(SlurmSettings):
        assert f"| `{field.name}` |" in guide, f"[slurm] {field.name} is missing from docs/slurm.md"
