"""Plugin loading: entry points, built-ins, duplicates, broken plugins, allow-list."""

import json
import textwrap

import pytest

from mtb import hookimpl
from mtb.errors import PluginError, UsageError
from mtb.plugins import DEFAULT_PLUGINS, build_plugin_manager
from mtb.strategy import Strategy


def fake_distribution(root, dist, module, body, version="1.2.3", entry=None):
    """A dist-info on sys.path whose `mtb` entry point (``entry``, default ``module``) names it."""
    info = root / f"{dist}-{version}.dist-info"
    info.mkdir()
    info.joinpath("METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    )
    info.joinpath("entry_points.txt").write_text(f"[mtb]\n{entry or module} = {module}\n")
    root.joinpath(f"{module}.py").write_text(textwrap.dedent(body))


GOOD = """
    from mtb import hookimpl
    from mtb.strategy import Strategy

    class Fancy(Strategy):
        name = "fancy"

    class NeedsMissing(Strategy):
        name = "needs-missing"
        requires = ("a_module_that_is_not_installed",)
        install_hint = "pip install fancy[extra]"

    @hookimpl
    def mtb_register_strategies(register):
        register(Fancy())
        register(NeedsMissing())
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("MTB_LOAD_PLUGINS", raising=False)
    monkeypatch.delenv("MTB_STRICT_PLUGINS", raising=False)
    fake_distribution(tmp_path, "fancy-dist", "fancy_plugin", GOOD)
    fake_distribution(tmp_path, "broken-dist", "broken_plugin", "raise ImportError('no gpu lib')")
    return tmp_path


def test_builtins_register_through_the_same_hooks(pm):
    assert [name for name, _ in pm.list_name_plugin()] == list(DEFAULT_PLUGINS)
    assert pm.registry("strategy").names() == ["single"]
    assert pm.registry("reporter").names() == ["json", "jsonl"]
    assert pm.registry("strategy").items["single"].plugin == "mtb.strategies.single"
    assert pm.info("mtb.strategies.single").distribution == "mtb-core"


CORE_COMMANDS = ["checkpoint", "data", "doctor", "estimate-memory", "fault", "matrix", "plugins"]
CORE_COMMANDS += ["profile", "run", "slurm"]


@pytest.mark.timeout(60)
def test_core_commands_come_from_a_builtin_plugin_through_mtb_register_commands(pm):
    from click.testing import CliRunner

    from mtb.cli import make_cli

    assert sorted(make_cli(pm).commands) == CORE_COMMANDS
    hooks = {impl.plugin_name for impl in pm.hook.mtb_register_commands.get_hookimpls()}
    assert hooks == {"mtb.cli.commands"}
    listed = CliRunner().invoke(make_cli(pm), ["plugins", "--json"])
    assert listed.exit_code == 0, listed.output
    entry = next(e for e in json.loads(listed.output) if e["name"] == "mtb.cli.commands")
    assert entry["distribution"] == "mtb-core" and entry["builtin"]
    assert [c["name"] for c in entry["registers"]["commands"]] == CORE_COMMANDS


@pytest.mark.timeout(60)
def test_disabling_the_builtin_commands_plugin_leaves_an_empty_cli(monkeypatch):
    from mtb.cli import make_cli

    monkeypatch.setenv("MTB_DISABLE_PLUGINS", "mtb.cli.commands")
    assert make_cli(build_plugin_manager(load_entry_points=False)).commands == {}


def test_entry_point_plugin_is_attributed_to_its_distribution(site, capsys):
    pm = build_plugin_manager()
    registry = pm.registry("strategy")
    assert registry.items["fancy"].plugin == "fancy_plugin"
    info = pm.info("fancy_plugin")
    assert (info.distribution, info.version, info.builtin) == ("fancy-dist", "1.2.3", False)


def test_broken_plugin_is_skipped_with_one_warning(site, capsys):
    pm = build_plugin_manager()
    assert pm.get_plugin("broken_plugin") is None
    assert pm.get_plugin("fancy_plugin") is not None
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "mtb: warning: plugin 'broken_plugin' failed to load, skipped: ImportError: no gpu lib"
    ]


def test_strict_mode_makes_a_broken_plugin_fatal(site, monkeypatch):
    monkeypatch.setenv("MTB_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="plugin 'broken_plugin' failed to load: ImportError"):
        build_plugin_manager()


def test_allow_list_loads_only_named_plugins(site, monkeypatch, capsys):
    monkeypatch.setenv("MTB_LOAD_PLUGINS", "fancy_plugin")
    pm = build_plugin_manager()
    assert pm.get_plugin("fancy_plugin") is not None
    assert pm.get_plugin("broken_plugin") is None
    assert capsys.readouterr().err == ""  # the broken one was never imported
    monkeypatch.setenv("MTB_LOAD_PLUGINS", "")
    pm = build_plugin_manager()
    assert [name for name, _ in pm.list_name_plugin()] == list(DEFAULT_PLUGINS)


def test_unavailable_strategy_stays_listed_but_cannot_be_selected(site):
    registry = build_plugin_manager().registry("strategy")
    entry = registry.items["needs-missing"]
    assert entry.unavailable_reason == (
        "needs a_module_that_is_not_installed; install with: pip install fancy[extra]"
    )
    with pytest.raises(UsageError, match="strategy 'needs-missing' is unavailable: needs"):
        registry.get("needs-missing")


class BadName:
    @hookimpl
    def mtb_register_strategies(self, register):
        strategy = Strategy()
        strategy.name = "Has Spaces"
        register(strategy)


def test_invalid_names_are_rejected(pm):
    pm.register(BadName(), name="bad-name")
    try:
        with pytest.raises(PluginError, match="invalid name 'Has Spaces'"):
            pm.registry("strategy")
    finally:
        pm.unregister(name="bad-name")


def test_unknown_strategy_lists_installed_ones(pm):
    with pytest.raises(UsageError) as caught:
        pm.registry("strategy").get("ddp")
    assert str(caught.value) == "unknown strategy 'ddp'; installed: single"


def test_plugin_modules_variable_registers_importable_modules(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(tmp_path))
    tmp_path.joinpath("local_plugin.py").write_text(textwrap.dedent(GOOD))
    monkeypatch.setenv("MTB_PLUGIN_MODULES", "local_plugin")
    pm = build_plugin_manager()
    assert pm.registry("strategy").items["fancy"].plugin == "local_plugin"


def test_dotted_requirement_with_a_missing_parent_is_unavailable():
    strategy = Strategy()
    strategy.requires = ("no_such_package_anywhere.ops",)
    assert strategy.unavailable_reason() == "needs no_such_package_anywhere.ops"
