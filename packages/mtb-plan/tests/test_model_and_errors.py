"""The planner's formulas and its error arithmetic, in-process (only core's `single` is here)."""

import math

import attrs
import pytest

from mtb.api import UsageError, get_plugin_manager, resolve_config
from mtb_plan import verify
from mtb_plan.layouts import enumerate_layouts, factorisations
from mtb_plan.planning import World, check_fits, plan_rows
from mtb_plan.profile import Compute, Curve, Profile
from mtb_plan.workload import Workload

pytestmark = pytest.mark.timeout(60)


def cpu_profile(**changes) -> Profile:
    compute = Compute(
        ranks_per_node=1,
        matmul_flops_per_s=1e10,
        matmul_backward_flops_per_s=1e10,
        elementwise_bytes_per_s=1e9,
        op_overhead_s=1e-5,
        optimizer_bytes_per_s=1e9,
    )
    curve = Curve(
        collective="all_reduce", group_size=2, latency_s=1e-4, bus_bandwidth_bytes_per_s=1e9
    )
    fields = {"name": "test", "device": "cpu", "precision": "fp32", "devices_per_node": 1}
    fields.update(memory_bytes=2**33, compute=(compute,), comm=(curve,))
    return Profile(**{**fields, **changes})


@pytest.mark.parametrize("preset", ["tiny", "small", "tiny-long"])
@pytest.mark.parametrize("micro_batch", [1, 4])
def test_activations_equal_what_autograd_saves_on_the_model(preset, micro_batch):
    """The per-block and head terms against SavedActivations over a real forward, fp32."""
    import torch

    from mtb.api import GPT

    if preset == "small" and micro_batch == 4:
        pytest.skip("one small shape is enough")
    from mtb.activations import SavedActivations

    config = resolve_config(flags={"preset": preset})
    workload = Workload.of(preset, micro_batch, "fp32", "adamw")
    torch.manual_seed(0)
    model = GPT(config.model)
    tokens = torch.randint(0, config.model.vocab_size, (micro_batch, config.model.seq_len))
    with SavedActivations() as meter:
        loss = model(tokens, tokens)
    del loss
    predicted = workload.n_layers * workload.block_activation_bytes(micro_batch)
    predicted += workload.head_activation_bytes(micro_batch)
    assert predicted == pytest.approx(meter.peak_bytes, rel=2e-3)


def test_gemm_flops_match_the_models_flops_per_token():
    """Three times the forward FLOPs (forward + backward) equal PaLM's count (mtb's MFU) less
    the masked half of causal attention, which PaLM's formula does not discount."""
    from mtb.api import flops_per_token

    workload = Workload.of("small", 1, "fp32", "adamw")
    model = resolve_config(flags={"preset": "small"}).model
    forward = workload.n_layers * workload.block_matmul_flops(1) + workload.head_matmul_flops(1)
    per_token = 3 * forward / workload.seq_len
    causal_half = 6 * workload.n_layers * workload.d_model * workload.seq_len
    assert per_token == pytest.approx(flops_per_token(model) - causal_half, rel=1e-9)


def test_every_factorisation_multiplies_to_the_number():
    found = list(factorisations(12, 3))
    assert all(math.prod(parts) == 12 for parts in found)
    assert len(found) == len(set(found)) == 18


def test_single_on_one_rank_is_predicted_with_its_model_state():
    workload = Workload.of("tiny", 4, "fp32", "adamw")
    rows = plan_rows(get_plugin_manager(), workload, World(nodes=1, per_node=1), cpu_profile())
    single = [row for row in rows if row["strategy"] == "single" and row["fits"]]
    assert {row["options"]["micro_batch_size"] for row in single} == {1, 2, 4}
    from mtb.api import parameter_count

    parameters = parameter_count(resolve_config(flags={"preset": "tiny"}).model)
    assert {row["predicted"]["model_state_bytes"] for row in single} == {16 * parameters}
    ranks = [row["rank"] for row in rows if row["fits"]]
    assert ranks == list(range(1, len(ranks) + 1))


def test_no_layout_on_more_ranks_than_single_takes_is_one_line():
    workload = Workload.of("tiny", 4, "fp32", "adamw")
    world = World(nodes=1, per_node=2)
    pm = get_plugin_manager()
    pm_single = [entry.name for entry in pm.registry("strategy")]
    if pm_single != ["single"]:
        pytest.skip("other strategies are installed here; tests/test_plan.py covers them")
    rows = plan_rows(pm, workload, world, cpu_profile())
    with pytest.raises(UsageError, match="no layout runs preset 'tiny' on 2 ranks"):
        check_fits(rows, world, 2**30, workload)


def test_a_capacity_below_every_layout_is_one_line_with_the_smallest_peak():
    workload = Workload.of("tiny", 4, "fp32", "adamw")
    world = World(nodes=1, per_node=1)
    rows = plan_rows(get_plugin_manager(), workload, world, cpu_profile(memory_bytes=1000))
    assert not any(row["fits"] for row in rows)
    with pytest.raises(UsageError, match=r"smallest predicted peak is .* bytes per rank"):
        check_fits(rows, world, 1000, workload)


def test_missing_compute_figures_name_the_calibrate_command():
    profile = cpu_profile(path="lab.toml")
    with pytest.raises(UsageError) as refused:
        profile.compute_for(4)
    message = str(refused.value)
    assert "no compute figures at 4 rank(s) per node" in message
    assert (
        "mtb plan calibrate --device cpu --precision fp32 --nproc-per-node 1,4 --output lab.toml"
        in message
    )


def test_a_profile_of_another_precision_is_refused():
    workload = Workload.of("tiny", 4, "bf16", "adamw")
    with pytest.raises(UsageError, match="measured at fp32, the workload trains in bf16"):
        plan_rows(get_plugin_manager(), workload, World(nodes=1, per_node=1), cpu_profile())


def test_a_curve_time_is_latency_plus_bus_bytes():
    curve = Curve(
        collective="all_reduce", group_size=4, latency_s=1e-5, bus_bandwidth_bytes_per_s=1e9
    )
    assert curve.time_s(1e9) == pytest.approx(1e-5 + 2 * 3 / 4)
    assert curve.time_s(0) == 0.0


def test_relative_errors_are_predicted_minus_measured_over_measured():
    predicted = {
        "step_time_ms": 110.0,
        "tokens_per_s": 90.0,
        "peak_memory_bytes": 95,
        "model_state_bytes": 100,
    }
    measured = {"status": "ok", "step_time_ms": 100.0, "tokens_per_s": 100.0}
    measured.update(peak_memory_bytes=100, model_state_bytes=100)
    assert verify.errors(predicted, measured) == pytest.approx(
        {"step_time": 0.10, "tokens_per_s": -0.10, "peak_memory": -0.05, "model_state": 0.0}
    )
    assert verify.errors(predicted, {"status": "oom"}) is None


def test_spearman_matches_the_textbook_values():
    assert verify.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert verify.spearman([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    # ties take average ranks: ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4)
    assert verify.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)
    assert verify.spearman([1, 2], [2, 1]) is None


def _row(label, step_ms, measured_ms, fits=True):
    return {
        "label": label,
        "fits": fits,
        "predicted": {"step_time_ms": step_ms},
        "measured": {"step_time_ms": measured_ms},
        "error": {"step_time": step_ms / measured_ms - 1, "peak_memory": 0.02, "model_state": 0.0},
    }


def test_the_summary_finds_the_best_layouts_and_checks_each_target():
    rows = [_row("a", 100, 120), _row("b", 110, 100), _row("c", 200, 210), _row("d", 300, 290)]
    summary = verify.summary(rows, directory="m")
    assert summary["predicted_best"] == "a" and summary["measured_best"] == "b"
    assert summary["best_gap"] == pytest.approx(0.2)
    assert summary["max_abs_step_time_error"] == pytest.approx(1 / 6)
    assert summary["spearman"] == pytest.approx(0.8)
    assert summary["met"]["best_gap"] is False and summary["met"]["spearman"] is True
    assert summary["met"]["max_abs_step_time_error"] is True


def test_choose_takes_the_top_and_spreads_the_rest():
    rows = [{"fits": True, "label": str(index), "rank": index + 1} for index in range(12)]
    rows.append({"fits": False, "label": "x", "rank": None})
    chosen = [row["label"] for row in verify.choose(rows, 3, 3)]
    assert chosen[:3] == ["0", "1", "2"]
    assert len(chosen) == 6 and "x" not in chosen and len(set(chosen)) == 6


def test_the_planner_never_imports_a_sibling_package():
    from pathlib import Path

    import mtb_plan

    for path in Path(mtb_plan.__file__).parent.rglob("*.py"):
        text = path.read_text()
        assert "mtb_comm" not in text and "mtb_strategies" not in text, path


def test_enumeration_keeps_the_runtime_reason_for_each_refusal():
    workload = Workload.of("tiny", 4, "fp32", "adamw")
    rows = enumerate_layouts(get_plugin_manager(), workload, 1, 2, "cpu")
    refusals = {row.refused for row in rows if row.refused}
    assert any("strategy 'single' runs on at most 1 process(es)" in reason for reason in refusals)


def test_named_layouts_are_verified_too_and_an_unknown_name_is_one_line():
    rows = [{"fits": True, "label": str(index), "rank": index + 1} for index in range(12)]
    chosen = [row["label"] for row in verify.choose(rows, 2, 0, ("9", "4"))]
    assert chosen == ["0", "1", "4", "9"]
    with pytest.raises(UsageError, match="--verify-layout: no layout that fits is labelled 'z'"):
        verify.choose(rows, 2, 0, ("z",))


def test_a_pipeline_credits_its_fill_and_drain_with_the_solo_speed_up():
    from types import SimpleNamespace

    from mtb_plan.step_model import pipeline_s

    shape = SimpleNamespace(accumulation=2, pp=2, per_node=2)
    alone_twice_as_fast = SimpleNamespace(solo_speedup=2.0)
    # slots: stage 0 alone, both stages, stage 1 alone
    assert pipeline_s(1.0, shape, alone_twice_as_fast) == pytest.approx(0.5 + 1 + 0.5)
    assert pipeline_s(1.0, shape, SimpleNamespace(solo_speedup=1.0)) == pytest.approx(3.0)
    one_rank_per_node = SimpleNamespace(accumulation=4, pp=2, per_node=1)
    assert pipeline_s(1.0, one_rank_per_node, alone_twice_as_fast) == pytest.approx(5.0)


def test_overheads_add_up_per_mechanism_and_a_missing_one_is_one_line():
    from mtb_plan.profile import Overhead

    entries = tuple(
        Overhead(mechanism=name, ranks_per_node=1, per_micro_batch_s=seconds)
        for name, seconds in (("base", 0.010), ("tp", 0.003))
    )
    fsdp = Overhead(
        mechanism="fsdp", ranks_per_node=1, per_micro_batch_s=0.002, per_parameter_byte_s=1e-9
    )
    profile = cpu_profile(overhead=(*entries, fsdp), path="lab.toml")
    assert profile.overhead_s(("tp",), 1) == pytest.approx(0.013)
    assert profile.overhead_s(("tp",), 1, parameter_bytes=1e6) == pytest.approx(0.013)
    assert profile.overhead_s(("fsdp",), 1, parameter_bytes=1e6) == pytest.approx(0.013)
    assert cpu_profile().overhead_s(("tp", "pp"), 1) == 0.0  # a profile without overheads
    with pytest.raises(UsageError, match="no pp overhead at 1 rank"):
        profile.overhead_s(("tp", "pp"), 1)


def test_a_node_of_one_rank_pays_a_mechanism_of_several_at_the_fewest_ranks_measured():
    """calibrate runs base and ac on one rank, the rest from 2 ranks up: one device, or a
    cluster of one rank a node, pays those at the fewest ranks per node measured, and a
    missing one names a calibration that measures it (one rank alone never would)."""
    from mtb_plan.profile import Overhead

    costs = [("base", 1, 0.010), ("base", 2, 0.020), ("zero", 4, 0.009), ("zero", 2, 0.004)]
    costs += [("fsdp", 4, 0.006), ("ac", 2, 0.001)]
    entries = tuple(
        Overhead(mechanism=name, ranks_per_node=ranks, per_micro_batch_s=seconds)
        for name, ranks, seconds in costs
    )
    profile = cpu_profile(overhead=entries, path="lab.toml")
    assert profile.overhead_s(("zero",), 1) == pytest.approx(0.014)  # base at 1, zero at 2
    assert profile.overhead_s(("fsdp",), 1) == pytest.approx(0.016)
    assert profile.overhead_s(("zero",), 2) == pytest.approx(0.024)  # measured at 2: its own
    with pytest.raises(UsageError, match="no fsdp overhead at 2 rank"):
        profile.overhead_s(("fsdp",), 2)
    with pytest.raises(UsageError, match=r"no tp overhead at 1 rank.*--nproc-per-node 1,2 "):
        profile.overhead_s(("tp",), 1)
    with pytest.raises(UsageError, match=r"no ac overhead at 1 rank.*--nproc-per-node 1 "):
        profile.overhead_s(("ac",), 1)  # measured on one rank: 2 ranks' does not stand in


def test_a_pipeline_pays_fsdp_once_and_each_stage_its_share_of_the_rest():
    from types import SimpleNamespace

    from mtb_plan.overheads import _fitted, _parts
    from mtb_plan.profile import Overhead
    from mtb_plan.step_model import fixed_costs_s, micro_batches_paid

    costs = {"base": 0.010, "fsdp": 0.040, "rep": 0.015, "pp": -0.002}
    steps = {"fsdp": 0.005, "rep": 0.003}  # each one's cost once a step besides
    entries = tuple(
        Overhead(
            mechanism=name,
            ranks_per_node=4,
            per_micro_batch_s=seconds,
            per_step_s=steps.get(name, 0.0),
        )
        for name, seconds in costs.items()
    )
    compute = attrs.evolve(cpu_profile().compute[0], ranks_per_node=4, solo_speedup=1.0)
    profile = cpu_profile(overhead=entries, compute=(compute,))

    def shape(pp, accumulation, sharding="full"):
        return SimpleNamespace(
            accumulation=accumulation,
            pp=pp,
            per_node=4,
            sharding=sharding,
            engine="fsdp",
            tp=1,
            sp=False,
            cp=1,
            ep=1,
            checkpointing=False,
            stages=(2,) * pp,
        )

    # four micro-batches without a pipeline: every cost each time, the step's once
    assert fixed_costs_s(shape(1, 4), profile, 0) == pytest.approx(4 * 0.050 + 0.005)
    # with two stages: FSDP once; each stage half the blocks' machinery over 4 + 2 - 1 slots
    assert micro_batches_paid(shape(2, 4), compute) == pytest.approx(0.5 * 5)
    assert fixed_costs_s(shape(2, 4), profile, 0) == pytest.approx(2.5 * 0.008 + 0.045)
    # replicated FSDP pays its own measured cost, not sharded FSDP's, and under a pipeline
    # each micro-batch as the rest (its hooks run every micro-batch)
    assert fixed_costs_s(shape(2, 4, "replicate"), profile, 0) == pytest.approx(
        2.5 * (0.008 + 0.015) + 0.003
    )
    assert fixed_costs_s(shape(1, 4, "replicate"), profile, 0) == pytest.approx(
        4 * (0.010 + 0.015) + 0.003
    )
    # a calibration run's residual gives back the costs its mechanism was given
    known = {name: (seconds, steps.get(name, 0.0)) for name, seconds in costs.items()}
    for mechanism, runs in (
        ("pp", (shape(2, 2), shape(2, 4))),
        ("fsdp", (shape(1, 1), shape(1, 2))),
        ("rep", (shape(1, 1, "replicate"), shape(1, 2, "replicate"))),
        ("rep", (shape(2, 2, "replicate"), shape(2, 4, "replicate"))),
    ):
        fitted = [
            _fitted(mechanism, fixed_costs_s(run, profile, 0), run, known, compute) for run in runs
        ]
        assert _parts(fitted) == pytest.approx(known[mechanism])


def test_fixed_costs_split_per_micro_batch_and_per_step_and_calibrate_gives_them_back():
    from types import SimpleNamespace

    from mtb_plan.overheads import _fitted, _parts
    from mtb_plan.profile import Overhead
    from mtb_plan.step_model import fixed_costs_s

    parts = {"base": (0.003, 0.030), "tp": (0.020, 0.015), "pp": (0.004, 0.002)}
    entries = tuple(
        Overhead(mechanism=name, ranks_per_node=4, per_micro_batch_s=micro, per_step_s=step)
        for name, (micro, step) in parts.items()
    )
    compute = attrs.evolve(cpu_profile().compute[0], ranks_per_node=4, solo_speedup=1.0)
    profile = cpu_profile(overhead=entries, compute=(compute,))

    def shape(accumulation, tp=1, pp=1):
        return SimpleNamespace(
            accumulation=accumulation,
            pp=pp,
            per_node=4,
            sharding="none",
            engine="ddp",
            tp=tp,
            sp=False,
            cp=1,
            ep=1,
            checkpointing=False,
            stages=(2,) * pp,
        )

    # the step's costs once, the micro-batch's each time: 4 micro-batches of tp
    assert fixed_costs_s(shape(4, tp=2), profile, 0) == pytest.approx(4 * 0.023 + 0.045)
    # a two-stage pipeline of tp: each stage half the blocks over 4 + 2 - 1 slots
    assert fixed_costs_s(shape(4, 2, 2), profile, 0) == pytest.approx(2.5 * 0.027 + 0.047)
    # a mechanism whose second micro-batch measured cheaper keeps its negative part, even
    # where it takes a micro-batch's cost below 0 (so the step model gives back the runs it
    # was fitted on); over many micro-batches the step's sum never goes below 0
    cheaper = (*entries, Overhead(mechanism="sp", ranks_per_node=4, per_micro_batch_s=-0.030))
    cheap = cpu_profile(overhead=cheaper, compute=(compute,))
    for accumulation, expected in ((2, 2 * (0.023 - 0.030) + 0.045), (64, 0.0)):
        with_sp = SimpleNamespace(**{**vars(shape(accumulation, tp=2)), "sp": True})
        assert fixed_costs_s(with_sp, cheap, 0) == pytest.approx(expected)
    # the two calibration runs of each mechanism (one and two micro-batches) give its parts back
    known = {}
    for mechanism, runs in (
        ("base", (shape(1), shape(2))),
        ("tp", (shape(1, 2), shape(2, 2))),
        ("pp", (shape(2, 1, 2), shape(4, 1, 2))),
    ):
        fitted = [
            _fitted(mechanism, fixed_costs_s(run, profile, 0), run, known, compute) for run in runs
        ]
        known[mechanism] = _parts(fitted, base=mechanism == "base")
        assert known[mechanism] == pytest.approx(parts[mechanism])


def test_a_part_of_base_of_the_other_sign_from_noise_folds_and_a_mechanism_keeps_its_line():
    from mtb_plan.overheads import _parts

    # a second micro-batch measured cheaper than the first: base all once a step
    assert _parts([(1, 0.030), (2, 0.028)], base=True) == pytest.approx((0.0, 0.030))
    # a second micro-batch measured more than twice the first: base all per micro-batch
    assert _parts([(1, 0.010), (2, 0.025)], base=True) == pytest.approx((0.010, 0.0))
    # a mechanism's parts keep the line, of either sign
    assert _parts([(1, 0.030), (2, 0.028)]) == pytest.approx((-0.002, 0.032))
    assert _parts([(1, 0.010), (2, 0.025)]) == pytest.approx((0.015, -0.005))
    assert _parts([(1, -0.004), (2, -0.006)]) == pytest.approx((-0.002, -0.002))
    # cheaper than base and FSDP at one micro-batch, dearer at two (cp on 4 ranks): the
    # second micro-batch's cost is kept, where folding dropped it
    assert _parts([(1, -0.0086), (2, 0.010)]) == pytest.approx((0.0186, -0.0272))
    # a pipeline's runs pay 1.5 and 2.5 slots: a folded cost is per slot paid
    assert _parts([(1.5, 0.030), (2.5, 0.029)], base=True) == pytest.approx((0.0, 0.030))
    assert _parts([(1.5, 0.012), (2.5, 0.030)], base=True) == pytest.approx((0.008, 0.0))
    # one run, or two that pay alike: all of it per micro-batch
    assert _parts([(2, 0.010)]) == _parts([(2, 0.010), (2, 0.012)]) == (0.005, 0.0)


def test_checkpointing_never_fits_cheaper_than_none():
    """A run of a mechanism that only adds work, measured under the one without it, is
    noise: its cost there is 0 (tiny on 4 ranks fitted ac -2.4 ms at one micro-batch)."""
    from mtb_plan.overheads import _parts

    # a second checkpointed micro-batch measured cheaper: all of it once a step
    assert _parts([(1, 0.004), (2, 0.001)], adds_work=True) == pytest.approx((0.0, 0.004))
    # tiny-4's ac: -2.4 ms at one micro-batch, 3.7 at two; the line through 0 and 3.7
    assert _parts([(1, -0.0024), (2, 0.0037)], adds_work=True) == pytest.approx((0.0037, -0.0037))
    assert _parts([(1, -0.0024), (2, 0.0037)]) == pytest.approx((0.0061, -0.0085))
    assert _parts([(1, -0.001), (2, -0.002)], adds_work=True) == pytest.approx((0.0, 0.0))
    # costs above 0 keep their line
    assert _parts([(1, 0.004), (2, 0.010)], adds_work=True) == pytest.approx((0.006, -0.002))


@pytest.mark.parametrize(
    ("base_seconds", "ac_seconds"),
    [
        ((0.2, 0.3), (0.6, 0.8)),
        ((0.3, 0.25), (0.6, 0.8)),
        ((0.2, 0.3), (0.6, 0.62)),
        ((0.2, 0.3), (0.15, 0.62)),
    ],
    ids=["both-lines", "base-folds", "ac-folds-a-negative-slope", "ac-under-base-is-0"],
)
def test_each_pass_runs_every_mechanism_once_and_the_fastest_run_counts(
    monkeypatch, base_seconds, ac_seconds
):
    """The repeats of the fixed-cost runs alternate over the mechanisms, so a slow stretch of
    the machine falls on one run of several, and the fastest of a mechanism's runs counts;
    each mechanism runs at one and two micro-batches, what the second adds is per micro-batch
    (base's and ac's, where it adds less than nothing, is 0; ac's cost in each run is at
    least 0)."""
    from mtb_plan import overheads

    launched = []
    # per pass: base at 1 and 2 micro-batches, then ac at 1 and 2; the second pass fastest
    seconds = iter([0.9, 0.5, 0.7, 0.95, *base_seconds, *ac_seconds])

    def one_run(run, workload, device, timeout_s):
        launched.append(("ac" if run.activation_checkpointing else "base", run.grad_accum_steps))
        return next(seconds)

    monkeypatch.setattr(overheads, "_one_run_s", one_run)
    pm, workload, profile = (
        get_plugin_manager(),
        Workload.of("tiny", 1, "fp32", "adamw"),
        cpu_profile(),
    )
    runs = overheads.Runs(repeats=2)
    found = {e.mechanism: e for e in overheads.measure(pm, workload, 1, profile, runs, print)}
    assert launched == [("base", 1), ("base", 2), ("ac", 1), ("ac", 2)] * 2
    nano = overheads.nano_overrides(workload)
    predicted = {
        key: overheads._nano_run(pm, workload, nano, key[0], 1, profile, key[1])[2]
        for key in launched[:4]
    }
    base_1 = base_seconds[0] - predicted["base", 1]
    base_micro = max(0.0, base_seconds[1] - predicted["base", 2] - base_1)
    assert found["base"].per_micro_batch_s == pytest.approx(base_micro)
    assert found["base"].per_step_s == pytest.approx(base_1 - base_micro)
    ac_1 = max(0.0, ac_seconds[0] - predicted["ac", 1] - base_1)
    ac_2 = max(0.0, ac_seconds[1] - predicted["ac", 2] - (base_1 + base_micro))
    ac_micro = max(0.0, ac_2 - ac_1)
    assert found["ac"].per_micro_batch_s == pytest.approx(ac_micro)
    assert found["ac"].per_step_s == pytest.approx(ac_1 - ac_micro)
    assert "the fastest of 2 runs, each in its own pass" in found["ac"].how
    predicted_ms = " and ".join(f"{predicted['ac', count] * 1e3:.2f}" for count in (1, 2))
    measured_ms = " and ".join(f"{value * 1e3:.2f}" for value in ac_seconds)
    figures = f"the runs measured {measured_ms} ms a step, the model without fixed costs "
    assert found["ac"].how.endswith(figures + predicted_ms)


def test_each_overhead_run_takes_its_mechanism_and_fills_the_rest_with_fsdp():
    from mtb_plan.overheads import LAYOUTS, _flags, candidate
    from mtb_plan.profile import MECHANISMS, Overhead

    assert tuple(LAYOUTS) == MECHANISMS  # every measured mechanism is one a profile may hold
    for name in LAYOUTS:
        Overhead(mechanism=name, ranks_per_node=2, per_micro_batch_s=0.0)

    assert candidate("base", 1).strategy == "single" and candidate("tp", 1) is None
    assert candidate("tp", 4).mesh == {"tp": 2, "dp_shard": 2}
    assert candidate("cp", 2).mesh == {"cp": 2, "dp_shard": 1}
    assert candidate("rep", 4).mesh == {"dp_replicate": 4}  # FSDP over a shard group of one
    assert candidate("rep", 1) is None
    assert candidate("zero3", 2).strategy == "zero3" and candidate("zero", 2).strategy == "zero2"
    assert candidate("pp", 3) is None
    twice = candidate("pp", 4, micro_batches=2)  # a pipeline's own micro-batches, doubled
    assert twice.mesh["pp_microbatches"] == 4 and twice.micro_batch_size == 4
    assert twice.grad_accum_steps == 1 and candidate("tp", 4, 2).grad_accum_steps == 2
    checkpointed = candidate("ac", 2)
    assert checkpointed.activation_checkpointing and checkpointed.strategy == "ddp"
    assert candidate("ac", 1).strategy == "single" and candidate("ac", 1).activation_checkpointing
    assert not candidate("base", 2).activation_checkpointing
    flags = _flags({"tp": 2, "sequence_parallel": True, "activation_checkpointing": False})
    assert flags == ["--tp", "2", "--sequence-parallel", "--no-activation-checkpointing"]


def test_calibrate_measures_every_group_a_node_forms_with_all_its_ranks_running():
    from mtb_plan.calibrate import comm_runs

    assert comm_runs([1, 4]) == [(4, 2), (4, 4)]
    assert comm_runs([1, 2, 8]) == [(2, 2), (8, 2), (8, 4), (8, 8)]
    assert comm_runs([1]) == []


def test_a_group_takes_the_curve_measured_with_its_layouts_ranks_running_else_alone():
    """4 ranks' groups of 2 wait on each other for a node's cores: a layout of 4 ranks per
    node takes the curve of groups of 2 measured among 4; without one (a written profile,
    an older one), the group's alone; with neither, one line."""
    from types import SimpleNamespace

    from mtb_plan.step_model import _collective_s

    def curve(group, running, latency):
        return Curve(
            collective="all_gather",
            group_size=group,
            ranks_per_node=running,
            latency_s=latency,
            bus_bandwidth_bytes_per_s=1e9,
        )

    among_four, alone = curve(2, 4, 3e-3), curve(2, 2, 3e-4)
    profile = cpu_profile(comm=(alone, among_four, curve(4, 4, 5e-3)))
    assert profile.curve("all_gather", 2, "node", 4) is among_four
    assert profile.curve("all_gather", 2, "node", 2) is alone
    assert profile.curve("all_gather", 2, "node", 8) is alone  # none among 8: alone
    # the step model asks with its layout's ranks per node
    for per_node, taken in ((4, among_four), (2, alone)):
        shape = SimpleNamespace(per_node=per_node, scope=lambda group, inner: "node")
        seconds = _collective_s(profile, "all_gather", 2, 1e6, shape)
        assert seconds == pytest.approx(taken.time_s(1e6))
    written = cpu_profile(comm=(curve(2, None, 1e-5),))
    assert written.curve("all_gather", 2, "node", 4).latency_s == 1e-5
    with pytest.raises(UsageError, match="no all_gather curve for 2 ranks"):
        cpu_profile(comm=(among_four,)).curve("all_gather", 2, "node", 2)


def test_fsdp_collectives_are_one_per_unit_and_nd_without_data_ranks_wraps_nothing():
    """FSDP gathers and reduces each block and the root apart, each paying the latency;
    ``nd`` with no data-parallel or context-parallel ranks (pure tp or pp) is not wrapped."""
    from types import SimpleNamespace

    from mtb_plan.step_model import Shape, communication_s, mechanisms, sharding_of

    fsdp_like = SimpleNamespace(sharded_states=("parameters", "gradients", "optimizer_state"))
    assert sharding_of(fsdp_like, SimpleNamespace(dp=1, cp=1, state_shards=1)) == "none"
    assert sharding_of(fsdp_like, SimpleNamespace(dp=2, cp=1, state_shards=1)) == "replicate"
    assert sharding_of(fsdp_like, SimpleNamespace(dp=1, cp=2, state_shards=2)) == "full"
    curves = tuple(
        Curve(collective=name, group_size=2, latency_s=1e-3, bus_bandwidth_bytes_per_s=1e9)
        for name in ("all_gather", "reduce_scatter", "all_reduce")
    )
    profile = cpu_profile(comm=curves)
    layout = dict(tp=1, pp=1, cp=1, dp=2, dp_shard=2, dp_replicate=1, ep=1, sp=False)
    steps = dict(micro_batch=1, accumulation=1, pipeline_microbatches=1, schedule=None)
    rest = dict(checkpointing=False, per_node=2, syncs=1, stages=(4,))
    shape = Shape(**layout, **steps, **rest, sharding="full", engine="fsdp")
    workload = Workload.of("tiny", 2, "fp32", "adamw")
    parameters = 10**6
    comm = communication_s(workload, shape, profile, parameters)
    units = 4 + 1
    one_pass = units * (1e-3 + 4 * parameters / units * 0.5 / 1e9)
    assert comm["parameters"] == pytest.approx(2 * one_pass)  # forward and backward
    assert comm["gradients"] == pytest.approx(one_pass)
    pure_tp = {**layout, "dp": 1, "dp_shard": 1, "tp": 2}
    unwrapped = Shape(**pure_tp, **steps, **rest, sharding="none", engine="ddp")
    assert "gradients" not in communication_s(workload, unwrapped, profile, parameters)
    assert "fsdp" not in mechanisms(unwrapped)
    assert mechanisms(shape) == ("fsdp",)
    replicated = attrs.evolve(shape, dp_replicate=2, dp_shard=1, sharding="replicate")
    assert mechanisms(replicated) == ("rep",)  # replicated FSDP: its own cost, not fsdp's
    # ZeRO-3 fetches and releases each module's parameters: its own cost, not ZeRO-1/2's
    for sharding, expected in (("optimizer", "zero"), ("grads", "zero"), ("full", "zero3")):
        zero = attrs.evolve(shape, engine="zero", sharding=sharding)
        assert mechanisms(zero) == (expected,)


def test_under_a_pipeline_a_stages_collectives_are_paid_in_every_slot_of_the_schedule():
    """tp, cp and ep run inside a stage's blocks: m + pp - 1 slots a step, as its compute;
    pp's own exchanges and the data-parallel ones are paid m times and once."""
    from mtb_plan.step_model import Shape, communication_s

    curves = tuple(
        Curve(collective=name, group_size=group, latency_s=1e-3, bus_bandwidth_bytes_per_s=1e9)
        for name in ("all_gather", "reduce_scatter", "all_reduce", "send_recv", "all_to_all")
        for group in (2, 4, 8)
    )
    profile = cpu_profile(comm=curves, devices_per_node=8)
    workload = Workload.of("tiny", 2, "fp32", "adamw")
    layout = dict(tp=2, pp=1, cp=1, dp=2, dp_shard=2, dp_replicate=1, ep=1, sp=False)
    steps = dict(micro_batch=2, accumulation=4, pipeline_microbatches=4, schedule="1f1b")
    rest = dict(checkpointing=False, per_node=8, syncs=1, stages=(2,))
    flat = Shape(**layout, **steps, **rest, sharding="full", engine="fsdp")
    piped = attrs.evolve(flat, pp=2, stages=(2, 2))
    alone, staged = (communication_s(workload, s, profile, 10**6) for s in (flat, piped))
    assert staged["tp"] == pytest.approx(alone["tp"] * (4 + 2 - 1) / 4)
    assert staged["parameters"] == pytest.approx(alone["parameters"])
    assert staged["gradients"] == pytest.approx(alone["gradients"])
    ring = attrs.evolve(piped, tp=1, cp=2)
    flat_ring = attrs.evolve(ring, pp=1, stages=(2,))
    in_ring, in_flat_ring = (
        communication_s(workload, s, profile, 10**6) for s in (ring, flat_ring)
    )
    assert in_ring["cp"] == pytest.approx(in_flat_ring["cp"] * 5 / 4)
    halved = attrs.evolve(ring, accumulation=2, pipeline_microbatches=2)
    exchanged = communication_s(workload, halved, profile, 10**6)["pp"]
    assert in_ring["pp"] == pytest.approx(2 * exchanged)  # m times: not stretched
    moe = Workload.of("tiny-moe", 2, "fp32", "adamw")
    experts = attrs.evolve(piped, tp=1, ep=2)
    fewer = attrs.evolve(experts, accumulation=2, pipeline_microbatches=2)
    routed, routed_fewer = (communication_s(moe, s, profile, 10**6)["ep"] for s in (experts, fewer))
    assert routed == pytest.approx(routed_fewer * (4 + 1) / (2 + 1))  # slots, not m


def test_cpu_verification_times_uncapped_runs_and_measures_memory_in_capped_ones(tmp_path):
    """The cap that makes the resident set follow live tensors maps each large allocation on
    its own, which slows a step: times come from runs as a user starts them."""
    import json

    workload = {"preset": "tiny", "precision": "fp32", "optimizer": "adamw"}
    document = {"config": {"workload": workload, "profile": {"device": "cpu"}}}
    document["memory_capacity_bytes"] = 2**30
    options = {"cell_timeout": 60, "steps": 8, "warmup_steps": 3, "trials": 2}
    # timing passes over the layouts (--trials), the capped memory run after the first
    assert verify.purposes(document) == ("timing", "memory", "timing-2", "timing-3")
    assert verify.purposes(document, 2) == ("timing", "memory", "timing-2")
    timing = verify.matrix_spec(document, [], options, "timing-2")["options"]
    memory = verify.matrix_spec(document, [], options, "memory")["options"]
    assert "memory_limit_per_rank" not in timing and timing["steps"] == 8
    assert "repeat" not in timing and "repeat" not in memory
    assert memory["memory_limit_per_rank"] == str(2**30) and memory["steps"] == 3
    gpu = {"config": {"workload": workload, "profile": {"device": "cuda"}}}
    assert verify.purposes(gpu) == ("both",)
    assert verify.matrix_spec(gpu, [], options, "both")["options"]["repeat"] == 2

    def cell(purpose, steps_ms, peak):
        result = {
            "trials": [{"tokens_per_step": 1000, "steps": [{"step_ms": ms} for ms in steps_ms]}],
            "summary": {"peak_rss_bytes": {"mean": peak}, "model_state_bytes_per_rank": 5},
        }
        (tmp_path / f"{purpose}.json").write_text(json.dumps(result))
        return {"status": "ok", "result": f"{purpose}.json"}, tmp_path

    found = {"timing": cell("timing", [10, 30, 20], 900), "memory": cell("memory", [9], 700)}
    found["timing-2"] = cell("timing-2", [25, 25, 40], 900)
    measured = verify.measurement(found)  # the faster pass's median; memory's is not a time
    assert (measured["step_time_ms"], measured["tokens_per_s"]) == (20, 50_000)
    assert (measured["peak_memory_bytes"], measured["model_state_bytes"]) == (700, 5)
    found["memory"] = ({"status": "oom", "error": "can't allocate"}, tmp_path)
    assert verify.measurement(found) == {"status": "oom", "error": "memory: can't allocate"}


def test_deepspeed_buffers_follow_its_default_bucket_sizes():
    """ZeRO-1/2 hold the logits' gradient only (measured against DeepSpeed's own runtime);
    ZeRO-3 keeps the gathered parameters and two gradient copies; buckets stop at
    DeepSpeed's sizes."""
    from mtb_plan.step_model import Shape, buffer_bytes

    layout = dict(tp=1, pp=1, cp=1, dp=2, dp_shard=2, dp_replicate=1, ep=1, sp=False)
    steps = dict(micro_batch=1, accumulation=1, pipeline_microbatches=1, schedule=None)
    rest = dict(checkpointing=False, per_node=2, syncs=1, stages=(4,), engine="zero")
    workload = Workload.of("tiny", 2, "fp32", "adamw")
    logits = workload.seq_len * workload.vocab_size * 4
    zero2 = Shape(**layout, **steps, **rest, sharding="grads")
    zero3 = Shape(**layout, **steps, **rest, sharding="full")
    assert buffer_bytes(workload, zero2, 10**6) == logits
    assert buffer_bytes(workload, zero3, 10**6) == logits + 3 * 4 * 10**6
    billions = 4 * 10**9
    assert buffer_bytes(workload, zero3, billions) == logits + 4 * (10**9 + 2 * 5 * 10**8)


def test_a_deepspeed_layout_holds_deepspeeds_runtime_and_a_profile_without_it_is_one_line():
    """DeepSpeed's import and engine hold more than torch's (about 70 MiB on CPU): a zero
    layout's peak starts from ``zero_runtime_bytes``, the others' from ``runtime_bytes``."""
    profile = cpu_profile(runtime_bytes=400 * 2**20, zero_runtime_bytes=470 * 2**20)
    assert profile.runtime_for("ddp") == profile.runtime_for("fsdp") == 400 * 2**20
    assert profile.runtime_for("zero") == 470 * 2**20
    without = cpu_profile(runtime_bytes=400 * 2**20, path="lab.toml")
    with pytest.raises(UsageError, match=r"no zero_runtime_bytes .*--output lab\.toml") as error:
        without.runtime_for("zero")
    assert "\n" not in str(error.value)


def test_calibrate_measures_deepspeeds_runtime_only_where_it_is_installed(monkeypatch):
    from types import SimpleNamespace

    from mtb_plan import calibrate

    ran = []
    monkeypatch.setattr(
        calibrate, "runtime_bytes", lambda device, cap, timeout, strategy: ran.append(strategy)
    )
    without = "requires deepspeed"  # zero2 registered, DeepSpeed not installed
    for zero, measured in ((None, ["single"]), (without, ["single"]), ("", ["single", "zero2"])):
        ran.clear()
        registry = [SimpleNamespace(name="single", unavailable_reason=None)]
        if zero is not None:
            registry.append(SimpleNamespace(name="zero2", unavailable_reason=zero or None))
        pm = SimpleNamespace(registry=lambda kind, registry=registry: registry)
        figures = calibrate.runtime_figures(pm, "cpu", 2**33, 60, lambda line: None)
        assert ran == measured
        fields = {"single": "runtime_bytes", "zero2": "zero_runtime_bytes"}
        assert list(figures) == [fields[name] for name in measured]


def test_a_timed_run_counts_its_fastest_trial_and_checkpointing_pays_its_own_cost():
    """Noise only ever slows a trial: the faster one's median is the step time, as in
    calibration. A checkpointed layout pays the ``ac`` fixed cost beside ``base``."""
    from types import SimpleNamespace

    from mtb_plan.step_model import mechanisms

    slowed = {"steps": [{"step_ms": ms} for ms in (30, 31, 29)]}
    quiet = {"steps": [{"step_ms": ms} for ms in (21, 20, 40)]}
    assert verify.median_step_ms({"trials": [slowed, quiet]}) == 21
    shape = SimpleNamespace(engine="ddp", tp=1, sp=False, pp=1, cp=1, ep=1, checkpointing=True)
    assert mechanisms(shape) == ("ac",)
    assert mechanisms(SimpleNamespace(**{**vars(shape), "checkpointing": False})) == ()


def _single(pm, workload, micro_batch: int):
    """``single``'s registry entry and its checked layout at ``micro_batch`` without AC."""
    entry = next(e for e in pm.registry("strategy") if e.name == "single")
    (checked,) = [
        c
        for c in enumerate_layouts(pm, workload, 1, 1, "cpu")
        if c.candidate.strategy == "single"
        and c.candidate.micro_batch_size == micro_batch
        and not c.candidate.activation_checkpointing
    ]
    return entry, checked


def test_training_efficiency_scales_the_arithmetic_and_not_the_operator_calls():
    """The calls' cost inside a step is the fixed costs' (measured at a negligible width), so
    only FLOPs and bytes slow down with the efficiency."""
    from mtb_plan.step_model import (
        BACKWARD_OP_FACTOR,
        BLOCK_FORWARD_OPS,
        HEAD_FORWARD_OPS,
        Shape,
        micro_batch_compute_s,
    )

    pm, workload = get_plugin_manager(), Workload.of("tiny", 4, "fp32", "adamw")
    entry, checked = _single(pm, workload, 4)
    shape, compute = Shape.of(checked, entry.item), cpu_profile().compute[0]

    def at(efficiency):
        changed = attrs.evolve(compute, training_efficiency=efficiency)
        return micro_batch_compute_s(workload, shape, changed)

    forward = workload.n_layers * BLOCK_FORWARD_OPS + HEAD_FORWARD_OPS
    calls = forward * (1 + BACKWARD_OP_FACTOR)
    assert at(0.0) == pytest.approx(calls * compute.op_overhead_s)
    assert at(3.0) - at(0.0) == pytest.approx(3 * (at(1.0) - at(0.0)))


def test_training_efficiency_recovers_the_efficiency_a_run_measured_at(monkeypatch):
    """A run that took what the model predicts at efficiency 2.5 calibrates 2.5, at the
    largest micro-batch asked for; a noisy one never below 0.5."""
    from mtb_plan import overheads

    pm, workload = get_plugin_manager(), Workload.of("tiny", 1, "fp32", "adamw")
    profile = cpu_profile()
    slower = attrs.evolve(
        profile, compute=(attrs.evolve(profile.compute[0], training_efficiency=2.5),)
    )
    seen = []

    def step_s(run, full, device, runs):
        seen.append(run.micro_batch_size)
        entry, checked = _single(pm, full, run.micro_batch_size)
        return overheads.predict(checked, entry.item, full, slower).step_time_ms / 1e3

    monkeypatch.setattr(overheads, "_step_s", step_s)
    runs = overheads.Runs(repeats=1)
    found, how = overheads.training_efficiency(pm, workload, 1, profile, runs, print, (1, 4, 2))
    assert found == pytest.approx(2.5) and seen == [4] and "micro-batch 4" in how
    # where micro-batch 4 would not fit a rank's memory, the largest that does is run
    two = Workload.of("tiny", 2, "fp32", "adamw")
    entry, checked = _single(pm, two, 2)
    peak = overheads.predict(checked, entry.item, two, profile).peak_memory_bytes
    small = attrs.evolve(profile, memory_bytes=peak)
    assert overheads.efficiency_micro_batch(pm, workload, 1, small, (1, 2, 4)) == 2
    monkeypatch.setattr(overheads, "_step_s", lambda *args: 0.0)
    assert overheads.training_efficiency(pm, workload, 1, profile, runs, print, (4,))[0] == 0.5


def test_gradients_and_activations_add_up_only_where_a_forward_follows_a_backward():
    """One micro-batch a step holds the larger of its activations and gradients (backward frees
    the one as it makes the other); accumulation holds both."""
    pm, workload = get_plugin_manager(), Workload.of("small", 4, "fp32", "adamw")
    rows = plan_rows(pm, workload, World(nodes=1, per_node=1), cpu_profile())
    single = {
        (row["options"]["micro_batch_size"], row["options"]["grad_accum_steps"]): row["predicted"]
        for row in rows
        if row["strategy"] == "single" and not row["options"]["activation_checkpointing"]
    }
    for (_, accumulation), p in single.items():
        gradients = p["model_state_bytes"] // 4  # 4 of adamw's 16 bytes per parameter
        activations, rest = p["activation_bytes"], p["runtime_bytes"] + p["buffer_bytes"]
        held = (
            (activations + gradients if accumulation > 1 else max(activations, gradients))
            + p["model_state_bytes"]
            - gradients
        )
        assert p["peak_memory_bytes"] == pytest.approx(rest + held, abs=2)
    assert {accumulation for _, accumulation in single} == {1, 2, 4}


def test_accumulating_zero_1_and_2_hold_whole_gradients_beside_their_partition():
    """small on 2 ranks: ZeRO-2 at 1 x 2 micro-batches peaked 160 MiB over a model that
    held only the gradient partition between micro-batches."""
    from mtb_plan.step_model import Shape, _states_and_activations, accumulated_gradient_bytes

    layout = dict(tp=1, pp=1, cp=1, dp=2, dp_shard=2, dp_replicate=1, ep=1, sp=False)
    steps = dict(micro_batch=1, pipeline_microbatches=1, schedule=None)
    rest = dict(checkpointing=False, per_node=2, syncs=1, stages=(4,), engine="zero")
    states = {"parameters": 400, "gradients": 200, "optimizer_state": 400, "total": 1000}
    for sharding, accumulation, whole in (("grads", 2, 400), ("optimizer", 4, 400)):
        shape = Shape(**layout, **steps, **rest, sharding=sharding, accumulation=accumulation)
        assert accumulated_gradient_bytes(shape, states) == whole
        assert _states_and_activations(shape, states, [300]) == 800 + 300 + 200 + 400
    one = Shape(**layout, **steps, **rest, sharding="grads", accumulation=1)
    zero3 = Shape(**layout, **steps, **rest, sharding="full", accumulation=2)
    assert accumulated_gradient_bytes(one, states) == accumulated_gradient_bytes(zero3, states) == 0


def test_the_optimizer_step_holds_gradients_and_on_cuda_adamws_temporaries():
    """torch's AdamW on CUDA (foreach) copies every parameter it updates; on CPU it goes one
    parameter at a time. Where gradients outweigh activations that step is the peak."""
    from mtb_plan.step_model import Shape, _states_and_activations, optimizer_temporary_bytes

    pm, workload = get_plugin_manager(), Workload.of("small", 1, "fp32", "adamw")
    entry, checked = _single(pm, workload, 1)
    shape = Shape.of(checked, entry.item)
    states = {"parameters": 400, "gradients": 400, "optimizer_state": 800, "total": 1600}
    assert optimizer_temporary_bytes(shape, states, "cpu", "adamw") == 0
    assert optimizer_temporary_bytes(shape, states, "cuda", "sgd") == 0
    temporaries = optimizer_temporary_bytes(shape, states, "cuda", "adamw")
    assert temporaries == 400
    assert _states_and_activations(shape, states, [300], temporaries) == 1200 + 400 + 400
    assert _states_and_activations(shape, states, [900], temporaries) == 1200 + 900
