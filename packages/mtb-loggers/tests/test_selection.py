"""``--log-to`` and ``[logging]``: names are checked before launch, one line each."""

import importlib.util

import pytest
from click.testing import CliRunner

from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager
from mtb.testing import PluginPackageTests
from mtb_loggers import plugin

pytestmark = pytest.mark.timeout(60)


class TestLoggersPackage(PluginPackageTests):
    entry_point = "loggers"
    distribution = "mtb-loggers"
    package = "mtb_loggers"


@pytest.fixture
def invoke():
    pm = build_plugin_manager(load_entry_points=False)
    pm.register(plugin, name="loggers")

    def run(*args):
        return CliRunner().invoke(make_cli(pm), ["run", "--preset", "tiny", *map(str, args)])

    return run


def test_the_built_in_loggers_are_registered_and_available():
    pm = build_plugin_manager(load_entry_points=False)
    pm.register(plugin, name="loggers")
    registry = pm.registry("metric_logger")
    assert registry.names() == ["tensorboard", "wandb", "mlflow"]
    assert [entry.unavailable_reason for entry in registry] == [None, None, None]


def test_names_from_the_flag_and_the_file_are_one_list(invoke, tmp_path):
    file = tmp_path / "run.toml"
    file.write_text('[logging]\nto = ["mlflow"]\ndir = "logs"\n')
    result = invoke("--config", file, "--print-config")
    assert result.exit_code == 0, result.output
    assert 'to = [\n    "mlflow",\n]\ndir = "logs"' in result.output
    result = invoke("--log-to", "tensorboard,wandb", "--log-to", "mlflow", "--print-config")
    assert 'to = [\n    "tensorboard",\n    "wandb",\n    "mlflow",\n]' in result.output


def test_an_unknown_logger_is_one_line_naming_the_field_and_what_is_installed(invoke):
    result = invoke("--log-to", "tensorboard,neptune")
    assert result.exit_code == 2
    assert result.output == (
        "Error: logging.to: unknown metric logger 'neptune'; "
        "installed: tensorboard, wandb, mlflow\n"
    )


def test_a_logger_whose_library_is_missing_says_how_to_install_it(invoke, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    result = invoke("--log-to", "wandb")
    assert result.exit_code == 2
    assert result.output == (
        "Error: logging.to: metric logger 'wandb' is unavailable: "
        "wandb is not installed: pip install 'mtb-loggers[wandb]'\n"
    )


def test_a_bare_string_in_the_file_is_refused(invoke, tmp_path):
    file = tmp_path / "run.toml"
    file.write_text('[logging]\nto = "tensorboard"\n')
    result = invoke("--config", file)
    assert result.exit_code == 2
    assert result.output.startswith("Error: logging.to: expected a list of strings")
