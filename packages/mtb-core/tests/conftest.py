"""Shared fixtures: a plugin manager per test and a CLI built over it."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from mtb.cli import make_cli
from mtb.plugins import build_plugin_manager
from mtb.testing import longest_first, mtb_plugin  # noqa: F401  (the fixture plugin authors use)

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


class SessionRun:
    """``python -m mtb run ARGS`` in a session of its own (a signal to its group never reaches
    pytest), stderr in a file; ``kill_all`` ends it and every process it started."""

    def __init__(self, tmp_path, name, *args, env=None):
        self.out, self.checkpoints = tmp_path / f"{name}.json", tmp_path / "ck"
        self.stderr_path = tmp_path / f"{name}.stderr"
        command = [sys.executable, "-m", "mtb", "run", *map(str, args), "--output", str(self.out)]
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                command,
                env=child_env(env),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                preexec_fn=as_from_a_terminal,
            )
        self.tree = psutil.Process(self.process.pid)
        self.seen: list[psutil.Process] = []

    def saved(self, timeout: float = 180) -> None:
        """Return once a checkpoint is published, remembering every process of the run."""
        give_up = time.monotonic() + timeout
        while not (self.checkpoints / "latest").exists():
            assert self.process.poll() is None, self.stderr()
            assert time.monotonic() < give_up, "no checkpoint published in time"
            time.sleep(0.05)
        with contextlib.suppress(psutil.NoSuchProcess):
            self.seen = self.tree.children(recursive=True)

    def rank(self, rank: int) -> psutil.Process:
        return next(p for p in self.seen if p.environ().get("RANK") == str(rank))

    def wait(self, timeout: float = 180) -> int:
        return self.process.wait(timeout)

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def published(self) -> list[str]:
        return sorted(p.name for p in self.checkpoints.iterdir())

    def kill_all(self) -> None:
        for process in [self.tree, *self.seen]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()


@pytest.fixture
def launched(tmp_path):
    """Start SessionRuns (``launched(name, *args, env=...)``); all are killed at the end."""
    runs = []

    def started(name, *args, env=None):
        runs.append(SessionRun(tmp_path, name, *args, env=env))
        return runs[-1]

    yield started
    for run in runs:
        run.kill_all()


#: the files that run longest, from CI's timings: they start first (see longest_first)
LONGEST_FIRST = ("test_launch.py", "test_signals.py", "test_matrix.py", "test_compile.py")


def pytest_collection_modifyitems(items):
    longest_first(items, LONGEST_FIRST)
