"""Calibration: the curve fit, the comm-document reader, the command's bad input, a real run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mtb.api import UsageError, get_plugin_manager
from mtb_plan import curves
from mtb_plan.calibrate_cli import calibrate_command
from mtb_plan.profile import BUS_FACTORS, load

TIMEOUT = 110


def test_the_fit_recovers_latency_and_bandwidth_from_exact_points():
    latency, busbw = 25e-6, 40e9
    sizes = [4096, 65536, 2**20, 8 * 2**20]
    factor = BUS_FACTORS["all_reduce"](4)
    points = [(b * factor, latency + b * factor / busbw) for b in sizes]
    fitted_latency, slope = curves.fit(points)
    assert fitted_latency == pytest.approx(latency, rel=1e-9)
    recovered_busbw = 1 / slope
    assert recovered_busbw == pytest.approx(busbw, rel=1e-9)


def test_the_fit_never_gives_a_negative_latency_or_bandwidth():
    assert curves.fit([(1000, 1e-3), (2000, 3e-3), (4000, 4e-3)])[0] >= 0
    latency, slope = curves.fit([(1000, 2e-4), (64000, 1.9e-4)])  # flat: not bandwidth-bound
    assert latency > 0 and slope == pytest.approx(1.9e-4 / 64000)


def comm_document(rows, world=2, nnodes=1, group_size=0):
    launch = {"nnodes": nnodes}
    return {
        "kind": "comm",
        "status": "ok",
        "config": {"dtype": "float32", "iters": 5, "warmup": 1, "launch": launch}
        | ({"group_size": group_size} if group_size else {}),
        "environment": {"world_size": world, "hostnames": ["a"] * world},
        "measurements": [
            {"operation": op, "mode": None, "status": "ok", "bytes": b, "time_p50_us": t}
            for op, b, t in rows
        ],
    }


def test_curves_of_a_document_fit_each_operation_with_its_bus_factor():
    # all_gather on 4 ranks: factor 3/4; 10 us + bytes x 0.75 / 1 GB/s
    rows = [("all_gather", b, 10 + b * 0.75 / 1e9 * 1e6) for b in (4096, 2**20)]
    (curve,) = curves.curves_of(comm_document(rows, world=4), "x.json")
    assert (curve.collective, curve.group_size, curve.scope) == ("all_gather", 4, "node")
    assert curve.latency_s == pytest.approx(10e-6)
    assert curve.bus_bandwidth_bytes_per_s == pytest.approx(1e9)
    assert "x.json" in curve.how and curve.measured
    assert curve.ranks_per_node == 4
    (cluster,) = curves.curves_of(comm_document(rows, world=4, nnodes=2), "y.json")
    assert cluster.scope == "cluster" and cluster.ranks_per_node is None
    # 4 ranks in groups of 2 at once: all_gather's factor for 2 ranks is 1/2
    rows = [("all_gather", b, 10 + b * 0.5 / 1e9 * 1e6) for b in (4096, 2**20)]
    (pairs,) = curves.curves_of(comm_document(rows, world=4, group_size=2), "z.json")
    assert (pairs.group_size, pairs.ranks_per_node) == (2, 4)
    assert pairs.bus_bandwidth_bytes_per_s == pytest.approx(1e9)
    assert "2 groups of 2 ranks at once" in pairs.how
    # 2 nodes of 2: groups of 2 sit within a node, groups of 4 span both
    (inside,) = curves.curves_of(comm_document(rows, 4, nnodes=2, group_size=2), "n.json")
    assert (inside.scope, inside.ranks_per_node) == ("node", 2)


def test_calibrate_runs_mtb_comm_for_each_group_with_all_of_a_nodes_ranks(monkeypatch):
    from mtb_plan import calibrate

    launched = []

    def run_comm(nproc, sizes, precision, device, timeout_s, output, group):
        launched.append((nproc, group, Path(output).name))
        rows = [(op, b, 10 + b / 1e3) for op in curves.OPERATIONS for b in (4096, 2**20)]
        return comm_document(rows, world=nproc, group_size=group)

    monkeypatch.setattr(curves, "run_comm", run_comm)
    found = calibrate.comm_curves([1, 4], "fp32", "cpu", "4K,1M", 60, "out/p", lambda _: None)
    assert launched == [(4, 2, "p-comm-4-groups-of-2.json"), (4, 4, "p-comm-4.json")]
    assert {(c.group_size, c.ranks_per_node) for c in found} == {(2, 4), (4, 4)}
    assert all("--group-size" in c.how for c in found)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "is not JSON"),
        ('{"kind": "train", "status": "ok"}', "is not an `mtb comm` result"),
        ('{"kind": "comm", "status": "failed"}', "has status 'failed'"),
    ],
)
def test_a_bad_comm_document_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=f"^--from-comm: {path}.*{message}"):
        curves.read_document(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--micro-batch", "1,x"], "--micro-batch: 'x' is not a positive integer"),
        (["--nproc-per-node", "0"], "--nproc-per-node: '0' is not a positive integer"),
        (["--preset", "huge"], "--preset: 'huge' is not one of: tiny, small"),
        (["--comm-sizes", "4Q"], "--comm-sizes: '4Q' is not a size"),
        (["--from-comm", "/nonexistent/c.json"], "--from-comm: cannot read /nonexistent/c.json"),
    ],
)
def test_bad_input_is_refused_before_anything_runs(tmp_path, args, message):
    result = CliRunner().invoke(calibrate_command, [*args, "--output", str(tmp_path / "p.toml")])
    assert isinstance(result.exception, UsageError), result.output
    assert str(result.exception).startswith(message)
    assert "\n" not in str(result.exception) and not (tmp_path / "p.toml").exists()


def run(args, tmp_path, timeout=TIMEOUT):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )


@pytest.mark.slow
def test_curves_of_a_real_mtb_comm_run(tmp_path):
    out = tmp_path / "comm.json"
    args = ["-m", "mtb", "comm", "--operations", ",".join(curves.OPERATIONS)]
    args += ["--all-to-all-mode", "equal", "--sizes", "4K,64K", "--warmup", "1", "--iters", "3"]
    args += ["--nproc-per-node", "2", "--device", "cpu", "--timeout", "100", "--output", str(out)]
    done = run(args, tmp_path)
    assert done.returncode == 0, done.stderr
    found = curves.curves_of(curves.read_document(out), out.name)
    assert sorted(c.collective for c in found) == sorted(curves.OPERATIONS)
    for curve in found:
        assert curve.group_size == 2 and curve.scope == "node"
        assert curve.latency_s >= 0 and curve.bus_bandwidth_bytes_per_s > 0


CALIBRATE = """
import sys
from mtb.api import MtbError
from mtb_plan.calibrate_cli import calibrate_command
try:
    calibrate_command(sys.argv[1:], standalone_mode=False)
except MtbError as error:
    sys.exit(f"{error}")
"""


@pytest.mark.slow(reason="operators at 1 then 2 ranks, one mtb comm run, 6 mtb runs: ~80 s")
@pytest.mark.timeout(2 * TIMEOUT + 20)
def test_a_real_calibration_of_tiny_writes_a_loadable_profile(tmp_path):
    args = ["--preset", "tiny", "--micro-batch", "1", "--nproc-per-node", "1,2"]
    args += ["--device", "cpu", "--comm-sizes", "4K,64K", "--timeout", "100", "--repeats", "1"]
    done = run(["-c", CALIBRATE, *args, "--output", "p.toml"], tmp_path, 2 * TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert "operators at 2 rank(s) per node" in done.stderr
    profile = load(tmp_path / "p.toml")
    assert (profile.device, profile.precision, profile.memory_scope) == ("cpu", "fp32", "node")
    assert profile.memory_bytes > 2**28 and profile.runtime_bytes > 2**24
    zero = {entry.name: entry for entry in get_plugin_manager().registry("strategy")}.get("zero2")
    if zero is None or zero.unavailable_reason:  # no DeepSpeed: no zero2 run to measure
        assert profile.zero_runtime_bytes is None
    else:
        assert profile.zero_runtime_bytes > profile.runtime_bytes
    assert [(c.ranks_per_node, c.threads_per_rank) for c in profile.compute] == [(1, 1), (2, 1)]
    for entry in profile.compute:
        figures = [getattr(entry, f) for f in ("matmul_flops_per_s", "elementwise_bytes_per_s")]
        figures += [entry.matmul_backward_flops_per_s, entry.op_overhead_s]
        figures += [entry.optimizer_bytes_per_s, entry.attention_flops_per_s]
        assert all(f > 0 for f in figures) and entry.measured and entry.how
    assert {c.collective for c in profile.comm} == set(curves.OPERATIONS)
    for curve in profile.comm:
        assert curve.bus_bandwidth_bytes_per_s > 0 and curve.latency_s >= 0 and curve.measured
    # only core's `single` is installed here: the base cost at one rank, measured by running it,
    # and activation checkpointing's on the same layout
    assert [(o.mechanism, o.ranks_per_node) for o in profile.overhead] == [("base", 1), ("ac", 1)]
    base = profile.overhead[0]
    assert base.per_micro_batch_s >= 0 and "mtb run of tiny" in base.how and "one run" in base.how
    lines = " ".join(done.stderr.split())  # the console wraps long lines
    assert "overhead of ac at 1 rank(s) per node, 2 micro-batches a step, run 1 of 1" in lines
    assert "at 1 and 2 micro-batches a step" in base.how
    document = json.loads((tmp_path / "p-comm-2.json").read_text())  # the evidence is kept
    assert document["kind"] == "comm"


def test_a_loaded_machine_is_warned_of_before_calibrating(monkeypatch, tmp_path):
    """Other processes on the cores slow every figure: calibrate says so first (on CPU)."""
    from mtb_plan import calibrate, calibrate_cli

    assert calibrate_cli.busy_warning(0.9, 2) is None
    assert "load average is 3.5 on 2 core(s)" in calibrate_cli.busy_warning(3.5, 2)

    def stop(**settings):
        raise UsageError("stopped before measuring")

    monkeypatch.setattr(calibrate, "calibrate", stop)
    monkeypatch.setattr(calibrate_cli.os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    args = ["--device", "cpu", "--nproc-per-node", "1", "--output", str(tmp_path / "p.toml")]
    result = CliRunner().invoke(calibrate_command, args)
    assert isinstance(result.exception, UsageError)
    assert "warning: the load average is 8.0" in result.stderr
