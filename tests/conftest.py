"""Shared helpers for the cross-package and end-to-end tests."""

import re
from pathlib import Path

import pytest

from mtb.testing import longest_first

ROOT = Path(__file__).resolve().parent.parent


def readme_block(marker: str, readme: str = "README.md") -> str:
    """The fenced block that follows ``<!-- marker -->`` in README.md (or another readme)."""
    text = (ROOT / readme).read_text()
    match = re.search(rf"<!-- {marker} -->\s*```bash\n(.*?)```", text, re.S)
    assert match, f"{readme} has no block marked {marker}"
    return match.group(1)


def _loopback_cluster_module():
    """deploy/slurm/loopback_cluster.py, imported from its path (it is a script, not a package)."""
    import importlib.util

    path = ROOT / "deploy" / "slurm" / "loopback_cluster.py"
    spec = importlib.util.spec_from_file_location("loopback_cluster", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A real two-node Slurm cluster (munged, slurmctld, slurmd n1 and n2) for this file's
    tests, SLURM_CONF set for them, stopped by its PIDs afterwards."""
    import os

    cluster = _loopback_cluster_module()
    missing = cluster.missing_programs()
    if missing:
        pytest.skip(
            f"Slurm is not installed here ({', '.join(missing)}): apt-get install slurm-wlm munge"
        )
    if os.geteuid() != 0:
        pytest.skip("the loopback Slurm cluster runs its slurmd as root")
    folder = tmp_path_factory.mktemp("slurm")
    with pytest.MonkeyPatch.context() as patch:
        try:
            for key, value in cluster.start(folder).items():
                patch.setenv(key, value)
            yield folder
        finally:
            cluster.stop(folder)


#: the straggler plugin (core's test plugins) on rank 0 of every run started meanwhile
SLOW = {
    "MTB_PLUGIN_MODULES": "mtb_test_straggler",
    "MTB_TEST_SLOW_RANK": "0",
    "PYTHONPATH": str(ROOT / "packages" / "mtb-core" / "tests" / "plugins"),
}


@pytest.fixture
def slowed(monkeypatch):
    """Steps of ``ms`` milliseconds (a sleep) in every run or job started meanwhile: Slurm's
    jobs inherit it through the environment sbatch exports."""

    def slow(ms: int) -> None:
        for key, value in {**SLOW, "MTB_TEST_SLOW_MS": str(ms)}.items():
            monkeypatch.setenv(key, value)

    return slow


#: files that run longest (the calibrated plan, then those mostly waiting on Slurm's jobs or a
#: fault smoke's launches), from CI's timings: they start first and overlap with the rest
LONGEST_FIRST = (
    "test_plan.py",
    "test_slurm_preemption.py",
    "test_slurm_runs.py",
    "test_fault_smoke_damage.py",
    "test_gpu_acceptance.py",
    "test_fault_smoke.py",
    "test_multihost.py",
    "test_slurm_jobs.py",
)


def pytest_collection_modifyitems(items):
    longest_first(items, LONGEST_FIRST)
