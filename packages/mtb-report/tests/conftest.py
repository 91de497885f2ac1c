"""Pytest fixtures of the report tests: the CLI over the installed plugins."""

import pytest
from click.testing import CliRunner

from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager


@pytest.fixture(scope="session")
def cli():
    return make_cli(build_plugin_manager())


@pytest.fixture
def invoke(cli):
    def run(*args):
        return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)

    return run
