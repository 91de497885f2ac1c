"""Multi-process launches: our launcher, torchrun, failing and hanging workers.

These start real worker processes over gloo (2 ranks), so they are the slow
tests; each subprocess has a timeout and each launch a wall-clock limit.
"""

import math
import os
import sys
from types import SimpleNamespace

import pytest
from conftest import PLUGIN_DIR, TINY, mtb_subprocess, read_json

pytestmark = pytest.mark.timeout(300)

PLUGIN = {"MTB_PLUGIN_MODULES": "mtb_test_allreduce", "MTB_LOAD_PLUGINS": ""}


def run_two_ranks(tmp_path, *extra, env=None):
    out = tmp_path / "result.json"
    args = ["run", "--strategy", "test-allreduce", *TINY, "--nproc-per-node", "2"]
    done = mtb_subprocess([*args, "--output", out, *extra], env={**PLUGIN, **(env or {})})
    return done, out


@pytest.mark.slow(reason="a 2-rank launch")
def test_plugin_failures_are_said_once_on_a_two_rank_run(tmp_path):
    """A plugin that fails to import warns once (not once per process); a reporter that
    raises after the result is written is one line, and the run's error blames no rank."""
    modules = "mtb_test_allreduce,mtb_test_boom,mtb_test_no_such_module"
    done, out = run_two_ranks(tmp_path, "--report", "boom", env={"MTB_PLUGIN_MODULES": modules})
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("plugin 'mtb_test_no_such_module' failed to load") == 1
    failure = "reporter 'boom' of plugin mtb_test_boom failed: ValueError: cannot render"
    assert done.stderr.count(failure) == 2  # its own line, and the run's error names the first
    assert done.stderr.strip().splitlines()[-1] == (
        f"Error: result written to {out} and kept; 1 plugin(s) failed, first: {failure}"
    )
    assert "rank 0" not in done.stderr
    assert read_json(out)["status"] == "ok"


@pytest.mark.slow(reason="a 2-rank launch; 57 s seen on a loaded 2-core machine")
def test_two_rank_launch_writes_one_result_with_every_rank(tmp_path):
    done, out = run_two_ranks(tmp_path)
    assert done.returncode == 0, done.stderr
    doc = read_json(out)
    assert doc["status"] == "ok"
    assert doc["environment"]["world_size"] == 2
    assert doc["environment"]["backend"] == "gloo"
    trial = doc["trials"][0]
    assert [r["rank"] for r in trial["per_rank"]] == [0, 1]
    assert trial["tokens_per_step"] == 2 * 2 * 32  # world x micro-batch x seq
    for step in trial["steps"]:  # a step's time is the slowest rank's
        i = step["step"] - 1
        assert step["step_ms"] == max(r["step_ms"][i] for r in trial["per_rank"])
        assert math.isfinite(step["loss"])
    assert "--nproc-per-node 2" in doc["provenance"]["command"]
    assert {p["name"] for p in doc["plugins"]} >= {"mtb_test_allreduce", "mtb.strategies.single"}
    assert "tokens/s (global)" in done.stdout


@pytest.mark.slow
def test_failing_worker_exits_1_naming_the_rank(tmp_path):
    done, out = run_two_ranks(tmp_path, "--timeout", "120", env={"MTB_TEST_FAIL_RANK": "1"})
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "Error: rank 1 failed: strategy 'test-allreduce' of plugin mtb_test_allreduce "
        "failed in setup: RuntimeError: injected failure on rank 1"
    )
    assert "Traceback" not in done.stderr
    doc = read_json(out)
    assert (doc["status"], doc["error"]) == ("failed", last.removeprefix("Error: "))
    assert doc["trials"] == [] and doc["config"]["strategy"] == "test-allreduce"


def test_a_killed_rank_is_blamed_before_peers_that_failed_or_were_stopped():
    from mtb.launch import _root_failure

    def failure(exitcode, timestamp, message="RuntimeError: Connection closed by peer", data=None):
        data = data or {}
        return SimpleNamespace(
            exitcode=exitcode, timestamp=timestamp, message=message, error_file_data=data
        )

    echo_first = {0: failure(1, 100), 1: failure(-9, 101)}
    assert _root_failure(echo_first) == 1
    assert _root_failure({0: failure(1, 101), 1: failure(1, 100)}) == 1
    assert _root_failure({0: failure(1, 100), 1: failure(1, 100)}) == 0
    oom = "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"
    assert _root_failure({0: failure(1, 100), 1: failure(1, 100, oom)}) == 1
    stopped_by_the_agent = {0: failure(-15, 100), 1: failure(1, 100)}
    assert _root_failure(stopped_by_the_agent) == 1
    signalled = failure(-15, 101, "stopped by SIGTERM from pid 7", {"signal": "SIGTERM"})
    assert _root_failure({0: failure(1, 100), 1: signalled}) == 1


@pytest.mark.slow
def test_hanging_worker_is_stopped_by_the_launch_timeout(tmp_path):
    # the test waits out the whole timeout, which stops the launch wherever its ranks are
    done, out = run_two_ranks(tmp_path, "--timeout", "15", env={"MTB_TEST_HANG_RANK": "1"})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == ("Error: launch exceeded launch.timeout_s=15 s")
    assert read_json(out)["status"] == "timeout"


@pytest.mark.slow
def test_torchrun_runs_the_cli_in_each_worker(tmp_path):
    import subprocess

    out = tmp_path / "result.json"
    env = {**os.environ, **PLUGIN, "PYTHONPATH": str(PLUGIN_DIR)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "127.0.0.1:0",
        "-m",
        "mtb",
        "run",
        "--strategy",
        "test-allreduce",
        *TINY,
        "--output",
        str(out),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    doc = read_json(out)
    assert doc["environment"]["world_size"] == 2
    assert doc["config"]["launch"]["nproc_per_node"] == 2  # the world torchrun gave
    assert len(doc["trials"][0]["per_rank"]) == 2


def test_a_rank_that_lost_a_peer_waits_for_the_launchers_stop_before_it_speaks(monkeypatch):
    """On Ctrl-C the first rank to die leaves its peers a connection error; the launcher's
    SIGINT reaches them within the grace and ends them silently, so no rank is blamed."""
    from mtb import launch, lifeline

    slept, said = [], []
    monkeypatch.setattr(launch.time, "sleep", slept.append)
    monkeypatch.setattr(lifeline, "record", lambda message, **extra: said.append(message))
    lost = "[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:26253: Connection reset by peer"
    launch.record_error(RuntimeError(lost))
    assert slept == [launch.PEER_LOST_GRACE_S] and said == [f"RuntimeError: {lost}"]
    launch.record_error(ValueError("a bad batch"))
    assert slept == [launch.PEER_LOST_GRACE_S] and said[-1] == "ValueError: a bad batch"
