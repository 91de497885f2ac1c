"""The installed plugin, driven through the ``mtb`` command like a user would.

Run by ``nox -s plugin_example`` against real (non-editable) installs of
mtb-core and this distribution. Every ``mtb`` process pays torch's import
time, so there are exactly three of them.
"""

import json
import math
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from mtb.testing import PluginPackageTests

TIMEOUT_S = 300
STRATEGY = "example-localsgd"


def mtb_executable() -> str:
    """The ``mtb`` script of this interpreter's environment (then PATH)."""
    found = shutil.which("mtb", path=str(Path(sys.executable).parent)) or shutil.which("mtb")
    if found is None:
        pytest.fail("the mtb command is not installed in this environment")
    return found


def mtb(*args, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    """The installed ``mtb`` with the plugins installed (``pythonpath``: a folder of more)."""
    env = dict(os.environ)
    for variable in ("MTB_LOAD_PLUGINS", "MTB_PLUGIN_MODULES", "MTB_STRICT_PLUGINS"):
        env.pop(variable, None)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        [mtb_executable(), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


class TestInstalledDistribution(PluginPackageTests):
    """mtb.testing's checks of an installed plugin: entry point, version, allow-list, no torch."""

    entry_point = "example"
    distribution = "mtb-example-strategy"
    package = "mtb_example_strategy"


def test_mtb_plugins_lists_the_example_plugin():
    proc = mtb("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    entries = {entry["name"]: entry for entry in json.loads(proc.stdout)}
    assert "example" in entries, sorted(entries)
    example = entries["example"]
    assert example["distribution"] == "mtb-example-strategy"
    assert example["version"] == version("mtb-example-strategy")
    assert not example["builtin"]
    assert "mtb_register_strategies" in example["hooks"]
    strategies = example["registers"]["strategies"]
    assert [s["name"] for s in strategies] == [STRATEGY]
    assert strategies[0]["available"] is True


def check_result(path: Path, world_size: int, measured_steps: int) -> None:
    doc = json.loads(path.read_text())
    assert doc["status"] == "ok", doc.get("error")
    assert doc["error"] is None
    assert doc["config"]["strategy"] == STRATEGY
    assert doc["environment"]["world_size"] == world_size
    assert "mtb-example-strategy" in [p["distribution"] for p in doc["plugins"]]
    (trial,) = doc["trials"]
    losses = [step["loss"] for step in trial["steps"]]
    assert len(losses) == measured_steps
    assert all(math.isfinite(loss) for loss in losses), losses
    assert len(trial["per_rank"]) == world_size
    for rank in trial["per_rank"]:
        assert rank["loss"], rank
        assert all(math.isfinite(loss) for loss in rank["loss"]), rank["loss"]


@pytest.mark.parametrize("nproc", [1, 2], ids=["1-process", "2-processes-gloo"])
def test_mtb_run_with_the_example_strategy(tmp_path, nproc):
    output = tmp_path / "r.json"
    # --steps counts every optimizer step, warmup included: 4 - 1 measured.
    args = ["run", "--strategy", STRATEGY, "--preset", "tiny", "--steps", "4"]
    args += ["--warmup-steps", "1", "--output", output]
    if nproc > 1:
        args += ["--nproc-per-node", nproc]
    proc = mtb(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert output.is_file(), proc.stdout + proc.stderr
    check_result(output, world_size=nproc, measured_steps=3)
