"""One bad plugin never breaks mtb: unknown hooks, raising hooks, clashes, the disable list."""

import inspect
import json
import sys

import pytest
from click.testing import CliRunner
from conftest import PLUGIN_DIR, mtb_subprocess, read_json
from test_plugins import GOOD, fake_distribution

from mtb import __version__, hookimpl, hookspecs
from mtb.cli import make_cli
from mtb.errors import PluginError
from mtb.plugins import build_plugin_manager
from mtb.reporting import Reporter
from mtb.strategy import Strategy, StrategyOption

WARNING = "mtb: warning: "


@pytest.fixture(autouse=True)
def lenient(monkeypatch):
    for name in ("MTB_STRICT_PLUGINS", "MTB_DISABLE_PLUGINS", "MTB_LOAD_PLUGINS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def raising(monkeypatch):
    """The test plugin that raises in every hook, importable in-process."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    import mtb_test_raising

    return mtb_test_raising


def cli_run(pm, *args):
    return CliRunner().invoke(make_cli(pm), [str(a) for a in args], catch_exceptions=False)


class Misspelled:
    @hookimpl
    def mtb_register_strategy(self, register):
        """Singular: matches no hookspec."""


class OldName:
    @hookimpl
    def mtb_run_start(self, context):
        """The hook's name before it was renamed to mtb_trial_start."""


def test_unknown_hook_is_a_warning_naming_plugin_and_hook(pm, capsys):
    pm.register(Misspelled(), name="typo")
    assert capsys.readouterr().err == (
        f"{WARNING}plugin 'typo' implements unknown hook 'mtb_register_strategy' "
        "(did you mean 'mtb_register_strategies'?); it is never called\n"
    )
    entry = next(
        e for e in json.loads(cli_run(pm, "plugins", "--json").output) if e["name"] == "typo"
    )
    assert entry["warnings"] == [
        "unknown hook 'mtb_register_strategy' (did you mean 'mtb_register_strategies'?)"
    ]


class Optional:
    @hookimpl(optionalhook=True)
    def mtb_some_future_hook(self):
        """Declared optional: a hook a newer mtb may add."""


def test_an_optional_unknown_hook_is_not_reported(pm, capsys):
    pm.register(Optional(), name="optional")
    assert capsys.readouterr().err == ""
    assert pm.warnings == {}


def test_a_renamed_hook_names_its_new_name(pm, capsys):
    pm.register(OldName(), name="old")
    assert "unknown hook 'mtb_run_start' (renamed to 'mtb_trial_start')" in capsys.readouterr().err


def test_unknown_hook_is_an_error_in_strict_mode(pm, monkeypatch):
    monkeypatch.setenv("MTB_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="plugin 'typo' implements unknown hook 'mtb_register_"):
        pm.register(Misspelled(), name="typo")
    assert pm.get_plugin("typo") is None


def test_a_raising_register_hook_drops_the_plugin_with_one_warning(pm, raising, capsys):
    pm.register(raising, name="raising")
    assert pm.registry("strategy").names() == ["single"]  # its "broken" is gone too
    assert pm.get_plugin("raising") is None
    assert pm.registry("reporter").names() == ["json", "jsonl"]
    assert capsys.readouterr().err == (
        f"{WARNING}plugin 'raising' failed in mtb_register_strategies, skipped: "
        "RuntimeError: this plugin is broken\n"
    )
    assert [(f.info.name, f.status) for f in pm.failures] == [("raising", "failed")]


def test_a_raising_register_hook_is_fatal_in_strict_mode(pm, raising, monkeypatch):
    monkeypatch.setenv("MTB_STRICT_PLUGINS", "1")
    pm.register(raising, name="raising")
    with pytest.raises(PluginError) as caught:
        pm.registry("strategy")
    assert str(caught.value) == (
        "plugin 'raising' failed in mtb_register_strategies: RuntimeError: this plugin is broken"
    )


def test_a_plugin_raising_in_every_hook_leaves_help_plugins_and_run_working(pm, raising, tmp_path):
    pm.register(raising, name="raising")
    assert cli_run(pm, "--help").exit_code == 0
    listed = cli_run(pm, "plugins", "--json")
    assert listed.exit_code == 0
    entry = next(e for e in json.loads(listed.stdout) if e["name"] == "raising")
    assert (entry["status"], entry["reason"]) == (
        "failed",
        "failed in mtb_register_strategies, skipped: RuntimeError: this plugin is broken",
    )
    table = cli_run(pm, "plugins")
    assert "failed: raising: failed in mtb_register_strategies" in table.stdout
    out = tmp_path / "r.json"
    args = ["run", "--strategy", "single", "--steps", "2", "--preset", "tiny", "--warmup-steps"]
    args += ["1", "--output", out]
    assert cli_run(pm, *args).exit_code == 0
    assert read_json(out)["status"] == "ok"


@pytest.mark.slow
def test_the_real_cli_skips_a_raising_plugin_and_strict_mode_stops_it():
    env = {"MTB_PLUGIN_MODULES": "mtb_test_raising"}
    for args in (["--help"], ["plugins", "--json"]):
        done = mtb_subprocess(args, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stderr.count(WARNING) == 1, done.stderr
    assert json.loads(done.stdout)[-1]["status"] == "failed"
    done = mtb_subprocess(["--help"], env={**env, "MTB_STRICT_PLUGINS": "1"}, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "Error: plugin 'mtb_test_raising' failed in mtb_register_strategies: "
        "RuntimeError: this plugin is broken"
    )


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in ("fancy_plugin", "other_fancy"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    fake_distribution(tmp_path, "fancy-dist", "fancy_plugin", GOOD)
    return tmp_path


def test_disable_list_excludes_entry_points_and_builtins_unimported(site, monkeypatch, capsys):
    monkeypatch.setenv("MTB_DISABLE_PLUGINS", "fancy_plugin, mtb.profiling.torch_profiler")
    pm = build_plugin_manager()
    assert pm.get_plugin("fancy_plugin") is None
    assert "fancy_plugin" not in sys.modules
    assert pm.registry("profiler").names() == []
    assert capsys.readouterr().err == ""
    listed = {e["name"]: e for e in json.loads(cli_run(pm, "plugins", "--json").stdout)}
    for name in ("fancy_plugin", "mtb.profiling.torch_profiler"):
        assert (listed[name]["status"], listed[name]["reason"]) == (
            "disabled",
            "disabled by MTB_DISABLE_PLUGINS",
        )
    assert listed["fancy_plugin"]["distribution"] == "fancy-dist"


def test_disable_list_warns_about_unknown_names(site, monkeypatch, capsys):
    monkeypatch.setenv("MTB_DISABLE_PLUGINS", "fancy-plugin")
    pm = build_plugin_manager()
    assert pm.get_plugin("fancy_plugin") is not None
    assert capsys.readouterr().err.startswith(
        f"{WARNING}MTB_DISABLE_PLUGINS names unknown plugin 'fancy-plugin'; known plugins: "
    )


def test_an_entry_point_name_used_by_two_distributions_names_both(site, capsys):
    fake_distribution(site, "other-dist", "other_fancy", GOOD, version="2.0", entry="fancy_plugin")
    pm = build_plugin_manager()
    (failure,) = pm.failures
    kept = pm.info("fancy_plugin").distribution
    skipped = failure.info.distribution
    assert {kept, skipped} == {"fancy-dist", "other-dist"}
    assert failure.status == "skipped"
    assert f"the name is taken by 'fancy_plugin' ({kept} " in failure.reason
    assert "uninstall one of them" in failure.reason
    assert capsys.readouterr().err.count(WARNING) == 1


class Clash:
    class Single(Strategy):
        name = "single"

    @hookimpl
    def mtb_register_strategies(self, register):
        register(self.Single())


def test_a_plugin_taking_a_taken_name_is_skipped_with_one_warning_naming_both(pm, capsys):
    pm.register(Clash(), name="clashing")
    strategies = pm.registry("strategy")
    assert strategies.items["single"].plugin == "mtb.strategies.single"
    assert pm.get_plugin("clashing") is None
    assert [(f.info.name, f.status) for f in pm.failures] == [("clashing", "skipped")]
    assert capsys.readouterr().err == (
        f"{WARNING}plugin 'clashing' is skipped: strategy 'single' is registered by both "
        f"'mtb.strategies.single' (mtb-core {__version__}) and 'clashing' (unpackaged); "
        "uninstall one or exclude it with MTB_DISABLE_PLUGINS\n"
    )


def test_a_clash_is_fatal_in_strict_mode(pm, monkeypatch):
    monkeypatch.setenv("MTB_STRICT_PLUGINS", "1")
    pm.register(Clash(), name="clashing")
    with pytest.raises(PluginError, match="plugin 'clashing' is skipped: strategy 'single'"):
        pm.registry("strategy")


def options_plugin(strategy_name, option):
    class Plugin:
        class Declares(Strategy):
            name = strategy_name
            options = (option,)

        @hookimpl
        def mtb_register_strategies(self, register):
            register(self.Declares())

    return Plugin()


def test_an_option_declared_differently_by_two_strategies_skips_the_second(pm, capsys):
    pm.register(options_plugin("one", StrategyOption("bucket_mb", int, 25, "MiB")), name="p1")
    pm.register(options_plugin("two", StrategyOption("bucket_mb", float, 1.0, "GiB")), name="p2")
    assert "one" in pm.registry("strategy").names()
    assert "two" not in pm.registry("strategy").names()
    assert capsys.readouterr().err == (
        f"{WARNING}plugin 'p2' is skipped: option 'bucket_mb' is declared differently by "
        "strategy 'one' of 'p1' (unpackaged) and strategy 'two' of 'p2' (unpackaged); rename one\n"
    )


def test_strategies_may_share_one_declaration_and_help_groups_options_by_strategy(pm):
    shared = StrategyOption("bucket_mb", int, 25, "bucket size", unit="MiB")
    pm.register(options_plugin("one", shared), name="p1")
    pm.register(options_plugin("two", shared), name="p2")
    pm.register(options_plugin("three", StrategyOption("depth", int, 2, "depth")), name="p3")
    help_text = cli_run(pm, "run", "--help").output
    first = help_text.index("Options of strategies one, two:\n  --bucket-mb INTEGER")
    assert help_text.index("Options of strategy three:\n  --depth INTEGER") > first
    assert help_text.index("--strategy TEXT") < help_text.index("Options of strategies")


def test_every_hookspec_is_typed():
    for name, spec in inspect.getmembers(hookspecs, inspect.isfunction):
        if name.startswith("mtb_"):
            signature = inspect.signature(spec)
            assert signature.return_annotation is None, name
            for parameter in signature.parameters.values():
                assert parameter.annotation is not inspect.Parameter.empty, (name, parameter)


class TrialObserver:
    def __init__(self):
        self.seen = []

    @hookimpl
    def mtb_trial_start(self, context):
        self.seen.append((context.rank, context.trial))


@pytest.mark.slow
def test_trial_start_fires_once_per_trial(pm, tmp_path):
    observer = TrialObserver()
    pm.register(observer, name="observer")
    args = ["run", "--preset", "tiny", "--steps", "2", "--warmup-steps", "1", "--repeat", "2"]
    assert cli_run(pm, *args, "--output", tmp_path / "r.json").exit_code == 0
    assert observer.seen == [(0, 0), (0, 1)]


def test_a_hook_pluggy_refuses_skips_the_plugin_like_an_import_failure(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.syspath_prepend(str(tmp_path))
    tmp_path.joinpath("wrong_args.py").write_text(
        "from mtb import hookimpl\n\n\n"
        "@hookimpl\ndef mtb_register_reporters(register):\n    pass\n\n\n"
        "@hookimpl\ndef mtb_step_end(context, bogus):\n    pass\n"
    )
    monkeypatch.setenv("MTB_PLUGIN_MODULES", "wrong_args")
    pm = build_plugin_manager()
    assert pm.get_plugin("wrong_args") is None
    assert pm.hook.mtb_register_reporters.get_hookimpls()[-1].plugin_name != "wrong_args"
    err = capsys.readouterr().err
    assert err.startswith(f"{WARNING}plugin 'wrong_args' failed to load, skipped: ")
    assert "PluginValidationError: Plugin 'wrong_args' for hook 'mtb_step_end'" in err


class AddsCommands:
    def __init__(self, name, fail):
        self.name, self.fail = name, fail

    @hookimpl
    def mtb_register_commands(self, cli):
        import click

        cli.add_command(click.Command(self.name, help="a test command", callback=lambda: None))
        if self.fail:
            raise ValueError("half way")


def test_a_raising_commands_hook_leaves_no_command_and_others_keep_theirs(pm, capsys):
    pm.register(AddsCommands("kept", fail=False), name="good")
    pm.register(AddsCommands("dropped", fail=True), name="bad")
    cli = make_cli(pm)
    assert "kept" in cli.commands and "dropped" not in cli.commands
    assert "run" in cli.commands
    assert capsys.readouterr().err == (
        f"{WARNING}plugin 'bad' failed in mtb_register_commands, skipped: ValueError: half way\n"
    )


class RaisingObserver:
    """Raises in mtb_step_end from the third step on; counts the steps it saw."""

    def __init__(self):
        self.seen = []

    @hookimpl
    def mtb_step_end(self, metrics):
        self.seen.append(metrics.step)
        if len(self.seen) >= 3:
            raise KeyError("x")


def test_an_observer_that_raises_is_named_and_the_measured_steps_are_kept(pm, tmp_path):
    from conftest import TINY

    observer = RaisingObserver()
    pm.register(observer, name="raising-observer")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(make_cli(pm), ["run", *TINY, "--output", str(out)])
    assert result.exit_code == 1
    assert observer.seen == [0, 1, 2]  # skipped after it raised, the run went on
    doc = read_json(out)
    assert [s["step"] for s in doc["trials"][0]["steps"]] == [1, 2, 3]
    assert doc["plugin_failures"] == [
        {"plugin": "raising-observer", "hook": "mtb_step_end", "error": "KeyError: 'x'",
         "ranks": [0]},
    ]  # fmt: skip
    line = (
        "mtb_step_end of plugin raising-observer failed on rank(s) 0: KeyError: 'x'; "
        "its observer hooks were skipped for the rest of the run"
    )
    assert f"mtb: {line}" in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: result written to")


class FailingSetup:
    class Broken(Strategy):
        name = "broken-setup"
        max_world_size = 1  # runs in this process, where the plugin is registered

        def setup(self, model, make_optimizer, context):
            raise ValueError("no engine today")

    @hookimpl
    def mtb_register_strategies(self, register):
        register(self.Broken())


def test_a_strategy_whose_setup_raises_is_named_with_its_plugin_and_phase(pm, tmp_path):
    from conftest import TINY

    pm.register(FailingSetup(), name="failing-setup")
    out = tmp_path / "r.json"
    args = ["run", "--strategy", "broken-setup", *TINY, "--output", str(out)]
    result = CliRunner().invoke(make_cli(pm), args)
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1] == (
        "Error: strategy 'broken-setup' of plugin failing-setup failed in setup: "
        "ValueError: no engine today"
    )


class LastButClashing:
    """Ordered first by pluggy (trylast), it registers a built-in's name."""

    @hookimpl(trylast=True)
    def mtb_register_strategies(self, register):
        register(Clash.Single())


def test_a_plugin_ordered_first_never_evicts_a_built_in(pm, capsys):
    pm.register(LastButClashing(), name="last-but-clashing")
    assert pm.registry("strategy").items["single"].plugin == "mtb.strategies.single"
    assert pm.get_plugin("last-but-clashing") is None
    assert "plugin 'last-but-clashing' is skipped" in capsys.readouterr().err


class OptionThenReporterClash:
    """A strategy with an option, and a reporter that takes the built-in json's name."""

    class Declares(Strategy):
        name = "declares"
        options = (StrategyOption("zz_opt", int, 1, "an option of a plugin that goes"),)

    class Json(Reporter):
        name = "json"
        suffix = ".json"

        def render(self, documents):
            return ""

    @hookimpl
    def mtb_register_strategies(self, register):
        register(self.Declares())

    @hookimpl
    def mtb_register_reporters(self, register):
        register(self.Json())


def test_options_of_a_plugin_dropped_in_a_later_kind_are_not_flags(pm):
    from mtb.registry import declared_options

    pm.register(OptionThenReporterClash(), name="goes")
    declared = declared_options(pm)
    assert "zz_opt" not in declared and pm.get_plugin("goes") is None
    assert "--zz-opt" not in cli_run(pm, "run", "--help").output


def test_an_observer_never_swallows_a_signal_or_the_deadline(pm):
    from mtb.errors import Interrupted
    from mtb.launch import LaunchTimeout
    from mtb.observers import Observers

    for error in (Interrupted(2), LaunchTimeout("launch exceeded launch.timeout_s=3 s")):

        class Interrupting:
            @hookimpl
            def mtb_step_end(self, metrics, error=error):
                raise error

        observers = Observers(pm)
        pm.register(plugin := Interrupting(), name="interrupting")
        try:
            with pytest.raises(type(error)):
                observers.call("mtb_step_end", context=None, metrics=None)
        finally:
            pm.unregister(plugin)
        assert observers.failures == []


class WrappingObserver:
    @hookimpl(wrapper=True)
    def mtb_step_end(self, metrics):
        return (yield)


def test_a_wrapper_observer_is_a_recorded_failure_not_a_silent_no_op(pm):
    from mtb.observers import Observers

    pm.register(WrappingObserver(), name="wrapping")
    observers = Observers(pm)
    observers.call("mtb_step_end", context=None, metrics=None)
    assert observers.failures == [
        {
            "plugin": "wrapping",
            "hook": "mtb_step_end",
            "rank": 0,
            "error": "TypeError: an observer hook cannot be a wrapper: implement it plainly",
        }
    ]
