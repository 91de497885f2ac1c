"""Shared fixtures: a plugin manager per test and a CLI built over it."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager
from mtb.testing import mtb_plugin  # noqa: F401  (the fixture plugin authors use)

PLUGIN_DIR = Path(__file__).parent / "plugins"
#: a fixed MFU peak: otherwise each rank of each run first times its CPU's matmul peak (about
#: a second under load); test_run_writes_result_with_trials_and_summary checks that calibration
FIXED_PEAK = ["--peak-tflops", "1"]
TINY = ["--preset", "tiny", "--steps", "4", "--warmup-steps", "1", *FIXED_PEAK]


@pytest.fixture
def pm():
    """Core's built-ins only: installed third-party plugins never leak into a test."""
    return build_plugin_manager(load_entry_points=False)


@pytest.fixture
def invoke(pm):
    """Run the CLI in-process over ``pm``; returns click's Result."""

    def run(*args):
        return CliRunner().invoke(make_cli(pm), [str(a) for a in args], catch_exceptions=False)

    return run


def child_env(env=None) -> dict:
    """This environment plus ``env``, with the test plugins importable."""
    child = {**os.environ, **(env or {})}
    child["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGIN_DIR), child.get("PYTHONPATH")]))
    return child


def mtb_subprocess(args, env=None, timeout=240):
    """``python -m mtb ARGS`` in a child with the test plugins importable."""
    return subprocess.run(
        [sys.executable, "-m", "mtb", *map(str, args)],
        env=child_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_json(path) -> dict:
    return json.loads(Path(path).read_text())


def as_from_a_terminal() -> None:
    """Default dispositions in the child, as a shell in a terminal starts a command.

    A test suite run as a background job inherits SIGINT ignored, and mtb keeps
    an ignored signal ignored (as nohup asks): without this the Ctrl-C tests
    would test that instead.
    """
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
