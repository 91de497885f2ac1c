"""`mtb plan` with the real strategies: the enumeration against the runtime, the model
states against `mtb estimate-memory`, and a calibrated plan verified by running it."""

import json
import subprocess
import sys

import attrs
import pytest

from mtb.api import UsageError, get_plugin_manager, resolve_config
from mtb_plan import verify
from mtb_plan.layouts import enumerate_layouts
from mtb_plan.planning import World, plan_rows
from mtb_plan.profile import Compute, Curve, Profile, load
from mtb_plan.workload import Workload

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")


def runtime_refusal(pm, flags: dict, tmp_path) -> str | None:
    """What `mtb run` says before it launches these flags: None when it would launch."""
    from mtb import launcher
    from mtb.errors import ConfigError

    try:
        config = resolve_config(flags={**flags, "output": str(tmp_path / "r.json")})
        launcher.preflight(launcher.prepare(config, pm), pm)
    except (ConfigError, UsageError) as refused:
        return str(refused)
    return None


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("preset", "ranks"), [("tiny", 2), ("tiny", 4), ("tiny-moe", 4)])
def test_every_layout_is_kept_or_refused_as_mtb_run_would(preset, ranks, tmp_path):
    pm = get_plugin_manager()
    workload = Workload.of(preset, 8, "fp32", "adamw")
    checked = enumerate_layouts(pm, workload, 1, ranks, "cpu")
    kept = [row for row in checked if row.refused is None]
    assert {row.candidate.strategy for row in kept} >= {"ddp", "fsdp", "nd"}
    assert any(row.layout.pp > 1 for row in kept) and any(row.layout.tp > 1 for row in kept)
    if workload.moe_experts:
        assert any(row.layout.ep > 1 for row in kept)
    for row in checked:
        said = runtime_refusal(pm, row.candidate.flags(workload), tmp_path)
        assert said == row.refused, row.candidate.label


def test_predicted_model_states_equal_estimate_memory(tmp_path):
    from click.testing import CliRunner

    from mtb.cli import make_cli

    pm = get_plugin_manager()
    workload = Workload.of("small", 8, "fp32", "adamw")
    rows = plan_rows(pm, workload, World(nodes=1, per_node=4), profile_for(4))
    seen = 0
    for row in rows:
        options = row["options"]
        mesh = {dim: options.get(dim, 1) for dim in ("tp", "pp")}
        if not row["predicted"] or options.get("cp", 1) > 1 or options.get("dp_replicate", 1) > 1:
            continue
        if options.get("pp_microbatches", 1) > 2:  # estimate-memory checks micro-batches of 2
            continue
        if row["strategy"] == "nd" and options.get("dp_shard", 1) * mesh["tp"] * mesh["pp"] != 4:
            continue
        args = ["estimate-memory", "--preset", "small", "--world-size", "4", "--json"]
        args += ["--strategy", row["strategy"], "--tp", str(mesh["tp"]), "--pp", str(mesh["pp"])]
        result = CliRunner().invoke(make_cli(pm), args, catch_exceptions=False)
        assert result.exit_code == 0, (args, result.output)
        (estimate,) = json.loads(result.stdout)
        assert row["predicted"]["model_state_bytes"] == estimate["total"], row["label"]
        seen += 1
    assert seen >= 10


def test_a_pipeline_stage_holds_gradients_beside_activations_once_a_forward_follows_a_backward():
    """GPipe runs every forward first, on every stage; in 1F1B a stage runs pp - i forwards
    first, so with pp micro-batches the first stage is GPipe's and the last runs a forward
    after its first backward, and with more micro-batches every stage does."""
    from mtb_plan.step_model import Shape, _states_and_activations, stage_activation_bytes

    pm = get_plugin_manager()
    workload = Workload.of("small", 8, "fp32", "adamw")
    strategies = {entry.name: entry.item for entry in pm.registry("strategy")}
    shapes = {
        (o.mesh["pp_schedule"], o.mesh["pp_microbatches"]): Shape.of(row, strategies["nd"])
        for row in enumerate_layouts(pm, workload, 1, 2, "cpu")
        if row.refused is None and (o := row.candidate).mesh.get("pp", 1) == 2
        if o.micro_batch_size == 8 and not o.activation_checkpointing
    }
    states = {"gradients": 400, "total": 1600}  # 1200 besides the gradients

    def peak(schedule, m, stages):
        return _states_and_activations(shapes[(schedule, m)], states, stages)

    gpipe, one_f_one_b = (
        stage_activation_bytes(workload, shapes[(s, 2)]) for s in ("gpipe", "1f1b")
    )
    assert gpipe[0] == one_f_one_b[0] and gpipe[1] == 2 * one_f_one_b[1]  # in flight: 2,2 / 2,1
    assert peak("gpipe", 2, [1000, 100]) == 1200 + max(1000, 400 + 500)
    assert peak("gpipe", 2, [300, 100]) == 1200 + 400 + 150
    assert peak("1f1b", 2, [300, 100]) == 1200 + max(400 + 150, 100 + 400)  # stage 1: 1 first
    assert peak("1f1b", 2, [300, 350]) == 1200 + 350 + 400
    assert peak("1f1b", 4, [300, 100]) == 1200 + 300 + 400


def test_hsdp_accumulating_with_a_sync_each_micro_batch_holds_a_second_gradient_copy():
    """FSDP2 over replicas keeps each unit's reduce output to the end of the backward; on the
    second micro-batch those are added into the gradients: two copies at once."""
    pm = get_plugin_manager()
    workload = Workload.of("small", 4, "fp32", "adamw")
    rows = plan_rows(pm, workload, World(nodes=1, per_node=2), profile_for(2))
    by_label = {row["label"]: row["predicted"] for row in rows if row["predicted"]}

    def held(label: str) -> tuple[int, int, int]:
        """(what the model adds to runtime, states and buffers; activations; gradients)"""
        p = by_label[label]
        besides = p["runtime_bytes"] + p["model_state_bytes"] + p["buffer_bytes"]
        return p["peak_memory_bytes"] - besides, p["activation_bytes"], p["model_state_bytes"] // 4

    extra, activations, gradients = held("nd rep2 mb1 ×2")  # gradients: 4 of adamw's 16 bytes
    assert activations < gradients and extra == pytest.approx(gradients, abs=2)
    extra, activations, _ = held("ddp mb1 ×2")  # DDP adds into its own gradients
    assert extra == pytest.approx(activations, abs=2)
    extra, activations, gradients = held("nd rep2 mb2")  # one micro-batch a step
    assert extra == pytest.approx(max(activations, gradients) - gradients, abs=2)


def profile_for(per_node: int) -> Profile:
    """A profile with every figure a CPU layout of ``per_node`` ranks asks for."""
    compute = Compute(
        ranks_per_node=per_node,
        matmul_flops_per_s=1e10,
        matmul_backward_flops_per_s=1e10,
        elementwise_bytes_per_s=1e9,
        op_overhead_s=1e-5,
        optimizer_bytes_per_s=1e9,
    )
    curves = tuple(
        Curve(collective=name, group_size=size, latency_s=1e-4, bus_bandwidth_bytes_per_s=1e9)
        for name in COLLECTIVES
        for size in (2, 4)
        if size <= per_node
    )
    fields = {"name": "test", "device": "cpu", "precision": "fp32", "devices_per_node": per_node}
    fields.update(runtime_bytes=2**28, zero_runtime_bytes=2**28 + 2**26)
    return Profile(**fields, memory_bytes=2**36, compute=(compute,), comm=curves)


def test_calibration_gives_back_the_measured_step_at_each_per_byte_layout(monkeypatch):
    """The per-byte costs calibrate derives are the ones the step model charges: predicted
    again with them, each calibration layout takes exactly its measured step; unless they
    stand for more passes over the bytes than the machinery makes: then they are bounded."""
    from mtb_plan import overheads
    from mtb_plan.profile import Overhead

    measured_s = 5.0  # seconds over tiny's 60 KB a rank: millions of passes
    monkeypatch.setattr(overheads, "_step_s", lambda run, workload, device, runs: measured_s)
    entries = tuple(
        Overhead(mechanism=name, ranks_per_node=2, per_micro_batch_s=0.001)
        for name in ("base", "fsdp", "tp")
    )
    profile = attrs.evolve(profile_for(2), overhead=entries)
    pm, workload = get_plugin_manager(), Workload.of("tiny", 2, "fp32", "adamw")
    runs = overheads.Runs(timeout_s=60, repeats=1)

    def calibrated_with_parameter_costs():
        return overheads.with_parameter_costs(pm, workload, profile, runs, lambda line: None)

    rate = profile.compute_for(2).elementwise_bytes_per_s
    for entry in calibrated_with_parameter_costs().overhead[1:]:
        assert entry.per_parameter_byte_s == pytest.approx(overheads.MAX_PASSES / rate)
        assert f"bounded at {overheads.MAX_PASSES})" in entry.how, entry.mechanism
    monkeypatch.setattr(overheads, "MAX_PASSES", float("inf"))
    calibrated = calibrated_with_parameter_costs()
    for entry in calibrated.overhead[1:]:
        assert entry.per_parameter_byte_s > 0 and "bounded" not in entry.how, entry.mechanism
        found = overheads._full_width(pm, workload, entry.mechanism, 2, calibrated, runs)
        assert found.predicted.step_time_ms == pytest.approx(measured_s * 1e3), entry.mechanism


def mtb(*args, timeout: int) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mtb", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.slow(reason="calibrates 2 ranks, then runs two layouts of the plan")
@pytest.mark.timeout(900)
def test_a_calibrated_plan_is_verified_by_running_it(tmp_path):
    profile = tmp_path / "cpu.toml"
    calibrated = mtb(
        "plan", "calibrate", "--preset", "tiny", "--micro-batch", "1,2", "--comm-sizes",
        "4K,64K", "--nproc-per-node", "2", "--device", "cpu", "--repeats", "1",
        "--output", profile, timeout=400,
    )  # fmt: skip
    assert calibrated.returncode == 0, calibrated.stderr[-2000:]
    measured = {(entry.mechanism, entry.ranks_per_node) for entry in load(profile).overhead}
    # one rank's figures are test_calibrate's (tests-plan): this test plans 2 ranks only
    assert measured >= {("base", 2), ("ac", 2), ("fsdp", 2), ("rep", 2), ("tp", 2), ("pp", 2)}
    assert ("cp", 2) in measured
    assert all(entry.training_efficiency >= 0.5 for entry in load(profile).compute)
    per_byte = {e.mechanism: e for e in load(profile).overhead if e.ranks_per_node == 2}
    for name in ("fsdp", "rep", "tp"):  # measured at full width
        assert (
            per_byte[name].per_parameter_byte_s >= 0 and "per parameter byte" in per_byte[name].how
        )
    output = tmp_path / "plan.json"
    planned = mtb(
        "plan", "--profile", profile, "--preset", "tiny", "--global-batch", "4",
        "--devices-per-node", "2", "--verify", "1", "--spread", "1", "--trials", "2",
        "--steps", "4", "--warmup-steps", "1", "--verify-dir", tmp_path / "verify",
        "--output", output,
        timeout=400,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr[-2000:]
    document = json.loads(output.read_text())
    verified = [row for row in document["layouts"] if row.get("measured")]
    assert len(verified) == 2 and all(row["measured"]["status"] == "ok" for row in verified)
    for row in verified:
        assert abs(row["error"]["model_state"]) <= 0.01, row["label"]
        assert row["error"]["step_time"] == pytest.approx(
            row["predicted"]["step_time_ms"] / row["measured"]["step_time_ms"] - 1
        )
    specs = {
        name: (tmp_path / "verify" / f"{name}.toml").read_text() for name in ("timing", "memory")
    }
    assert (
        "memory_limit_per_rank" in specs["memory"]
        and "memory_limit_per_rank" not in specs["timing"]
    )
    # two timing passes over the layouts: the faster median is the layout's step time
    first = verified[0]
    passes = [
        json.loads((tmp_path / "verify" / name / "matrix.json").read_text())["cells"]
        for name in ("timing", "timing-2")
    ]
    medians = [
        verify.median_step_ms(
            json.loads((tmp_path / "verify" / name / cells[0]["result"]).read_text())
        )
        for name, cells in zip(("timing", "timing-2"), passes, strict=True)
    ]
    assert first["measured"]["step_time_ms"] == min(medians)
    summary = document["verification"]
    assert summary["verified"] == 2 and summary["predicted_best"] == verified[0]["label"]
    assert "rank" in planned.stdout and "plan written to" in planned.stdout
    report = mtb(
        "report", output, "--format", "markdown", "--output", tmp_path / "r.md", timeout=120
    )
    assert report.returncode == 0, report.stderr
    assert verified[0]["label"] in (tmp_path / "r.md").read_text()


def test_bad_world_and_profile_input_is_one_line(tmp_path):
    profile = tmp_path / "p.toml"
    from mtb_plan.profile import to_toml

    profile.write_text(to_toml(profile_for(2)))
    refused = mtb(
        "plan", "--profile", profile, "--preset", "tiny", "--devices-per-node", "4", timeout=120
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().count("\n") == 0, refused.stderr
    assert "no compute figures at 4 rank(s) per node" in refused.stderr
    assert f"--nproc-per-node 2,4 --output {profile}" in refused.stderr
    bf16 = mtb("plan", "--profile", profile, "--preset", "tiny", "--precision", "bf16", timeout=120)
    assert bf16.returncode == 2 and "measured at fp32" in bf16.stderr
    missing = mtb("plan", "--preset", "tiny", timeout=120)
    assert missing.returncode == 2 and "--profile: required" in missing.stderr
    (tmp_path / "bad.toml").write_text("[profile]\nname = 'x'\ncolour = 1\n")
    bad = mtb("plan", "--profile", tmp_path / "bad.toml", timeout=120)
    assert bad.returncode == 2 and "bad.toml" in bad.stderr


def test_an_unavailable_strategy_is_refused_with_its_install_hint():
    pm = get_plugin_manager()
    workload = Workload.of("tiny", 8, "fp32", "adamw")
    rows = enumerate_layouts(pm, workload, 1, 2, "cpu")
    for entry in pm.registry("strategy"):
        if entry.unavailable_reason:
            refused = {row.refused for row in rows if row.candidate.strategy == entry.name}
            assert refused == {
                f"strategy {entry.name!r} is unavailable: {entry.unavailable_reason}"
            }


def test_candidate_flags_round_trip_to_mtb_run_options():
    """The matrix cell options are the flags the candidate was checked with."""
    pm = get_plugin_manager()
    workload = Workload.of("tiny", 8, "fp32", "adamw")
    for row in enumerate_layouts(pm, workload, 1, 4, "cpu")[::7]:
        options = row.candidate.options()
        flags = row.candidate.flags(workload)
        assert options["strategy"] == flags["strategy"]
        assert {k: options[k] for k in flags["parallel"]} == flags["parallel"]
        assert attrs.evolve(row.candidate).label == row.candidate.label
