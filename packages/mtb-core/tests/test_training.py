"""Training features in core: LR schedule, clipping, non-finite agreement,
activation checkpointing, strategy options and the state-bytes estimate."""

import math

import pytest
from conftest import PLUGIN_DIR, TINY, mtb_subprocess, read_json

from mtb import config, hookimpl
from mtb.errors import ConfigError
from mtb.schedule import lr_at
from mtb.strategy import Strategy, StrategyOption


def training(**values):
    return config.resolve(flags={"preset": "tiny", "training": values}).training


def test_constant_and_cosine_schedules():
    assert [lr_at(s, training(lr=0.1), 10) for s in (0, 5, 9)] == [0.1, 0.1, 0.1]
    cosine = training(lr=1.0, min_lr=0.1, lr_schedule="cosine", lr_warmup_steps=2)
    assert lr_at(0, cosine, 12) == 0.5 and lr_at(1, cosine, 12) == 1.0
    assert lr_at(2, cosine, 12) == 1.0  # decay starts after warmup
    assert lr_at(7, cosine, 12) == pytest.approx(0.1 + 0.9 * 0.5)  # half way
    assert lr_at(12, cosine, 12) == pytest.approx(0.1)
    with pytest.raises(ConfigError, match=r"training\.min_lr: 2\.0 must be <= training\.lr=1\.0"):
        training(lr=1.0, min_lr=2.0)


@pytest.mark.slow
def test_run_records_lr_grad_norm_and_clipping(invoke, tmp_path):
    out = tmp_path / "r.json"
    args = ["--lr-schedule", "cosine", "--lr-warmup-steps", "2", "--max-grad-norm", "1e-3"]
    assert invoke("run", *TINY, *args, "--output", out).exit_code == 0
    doc = read_json(out)
    steps = doc["trials"][0]["steps"]
    assert [s["lr"] for s in steps] == [
        lr_at(s["step"], training(**{"lr_schedule": "cosine", "lr_warmup_steps": 2}), 4)
        for s in steps
    ]
    assert all(s["grad_norm"] > 1e-3 and s["clipped"] for s in steps)
    assert doc["summary"]["clipped_steps"]["mean"] == 3


@pytest.mark.slow
def test_grad_norm_is_recorded_with_clipping_off_by_default(invoke, tmp_path):
    assert invoke("run", *TINY, "--output", tmp_path / "a.json").exit_code == 0
    steps = read_json(tmp_path / "a.json")["trials"][0]["steps"]
    assert all(s["grad_norm"] > 0 and s["clipped"] is False for s in steps)


@pytest.mark.slow
def test_nan_on_one_process_fails_with_one_line_and_a_failure_document(invoke, tmp_path):
    out = tmp_path / "r.json"
    result = invoke("run", *TINY, "--inject-nan-at-step", "2", "--output", out)
    assert result.exit_code == 1
    message = "non-finite loss on rank(s) 0 at step 2; no optimizer step was taken"
    assert result.output.strip().splitlines()[-1] == f"Error: {message}"
    assert (read_json(out)["status"], read_json(out)["error"]) == ("failed", message)


@pytest.mark.slow
def test_nan_on_rank_1_stops_both_ranks_with_the_same_message(tmp_path):
    out = tmp_path / "r.json"
    env = {"MTB_PLUGIN_MODULES": "mtb_test_allreduce", "MTB_LOAD_PLUGINS": ""}
    args = ["run", "--strategy", "test-allreduce", *TINY, "--nproc-per-node", "2"]
    args += ["--inject-nan-at-step", "2", "--inject-nan-rank", "1", "--output", out]
    done = mtb_subprocess(args, env=env)
    assert done.returncode == 1
    message = "non-finite loss on rank(s) 1 at step 2; no optimizer step was taken"
    lines = set(done.stderr.splitlines())
    assert {f"mtb: rank 0: {message}", f"mtb: rank 1: {message}"} <= lines
    assert read_json(out)["status"] == "failed"
    assert PLUGIN_DIR.exists()


@pytest.mark.slow
def test_activation_checkpointing_gives_the_same_losses(invoke, tmp_path):
    for name, extra in (("plain", []), ("ac", ["--activation-checkpointing"])):
        assert invoke("run", *TINY, *extra, "--output", tmp_path / f"{name}.json").exit_code == 0
    plain, ac = (read_json(tmp_path / f"{n}.json") for n in ("plain", "ac"))
    assert ac["config"]["training"]["activation_checkpointing"] is True
    for a, b in zip(plain["trials"][0]["steps"], ac["trials"][0]["steps"], strict=True):
        assert math.isclose(a["loss"], b["loss"], rel_tol=1e-5)


class WithOptions:
    class Tunable(Strategy):
        name = "tunable"
        max_world_size = 1
        options = (
            StrategyOption("bucket_mb", int, 25, "bucket size", unit="MiB"),
            StrategyOption("overlap", bool, True, "overlap communication"),
            StrategyOption("mode", str, "fast", "mode", choices=("fast", "safe")),
        )

        def setup(self, model, make_optimizer, context):
            from mtb.engine import Engine

            return Engine(model, make_optimizer(model.parameters()), context)

    @hookimpl
    def mtb_register_strategies(self, register):
        register(self.Tunable())


@pytest.fixture
def tunable(pm):
    pm.register(WithOptions(), name="with-options")
    yield pm
    pm.unregister(name="with-options")


@pytest.mark.slow
def test_strategy_options_become_flags_and_are_stored(tunable, invoke, tmp_path):
    help_text = " ".join(invoke("run", "--help").output.split())
    assert "--bucket-mb INTEGER bucket size [default: 25; unit: MiB]" in help_text
    assert "--overlap / --no-overlap" in help_text
    out = tmp_path / "r.json"
    toml = tmp_path / "run.toml"
    toml.write_text('[strategy_options]\nmode = "safe"\nbucket_mb = 5\n')
    args = ["run", "--strategy", "tunable", *TINY, "--config", toml, "--no-overlap"]
    result = invoke(*args, "--output", out)
    assert result.exit_code == 0, result.output
    options = read_json(out)["config"]["strategy_options"]
    assert options == {"bucket_mb": 5, "overlap": False, "mode": "safe"}


def test_strategy_option_errors_name_the_option(tunable, invoke, tmp_path):
    result = invoke("run", "--strategy", "single", *TINY, "--bucket-mb", "3")
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: strategy_options.bucket_mb: not an option of strategy 'single'; allowed: none"
    )
    toml = tmp_path / "run.toml"
    toml.write_text('[strategy_options]\nmode = "turbo"\n')
    result = invoke("run", "--strategy", "tunable", *TINY, "--config", toml)
    assert result.exit_code == 2
    assert result.output.strip() == (
        "Error: strategy_options.mode: 'turbo' is not one of: fast, safe"
    )
    toml.write_text("[strategy_options]\nbucket_mb = true\n")
    result = invoke("run", "--strategy", "tunable", *TINY, "--config", toml)
    assert result.output.strip() == (
        "Error: strategy_options.bucket_mb: expected an integer, got True"
    )


def test_state_estimate_shards_what_the_strategy_shards():
    train = training()
    replicated = Strategy().state_bytes_estimate(1000, 4, train)
    assert replicated == {
        "parameters": 4000,
        "gradients": 4000,
        "optimizer_state": 8000,
        "total": 16000,
    }
    sharded = Strategy()
    sharded.sharded_states = ("optimizer_state",)
    assert sharded.state_bytes_estimate(1000, 4, train)["total"] == 4000 + 4000 + 2000


@pytest.mark.slow
def test_result_sets_estimate_beside_measured_bytes(invoke, tmp_path):
    assert invoke("run", *TINY, "--output", tmp_path / "r.json").exit_code == 0
    summary = read_json(tmp_path / "r.json")["summary"]
    assert summary["model_state_estimate_bytes"]["total"] == 16 * 34688
    assert abs(summary["model_state_estimate_error"]) < 0.01


def test_non_finite_step_leaves_parameters_as_after_the_last_good_step(pm):
    import torch

    from mtb.context import RunContext
    from mtb.errors import NonFiniteError
    from mtb.trainer import Trainer

    cfg = config.resolve(
        flags={
            "preset": "tiny",
            "training": {"steps": 4, "warmup_steps": 0, "inject_nan_at_step": 2},
        }
    )
    context = RunContext(cfg, device=torch.device("cpu"))
    trainer = Trainer(context, pm.registry("strategy").get("single"), pm)
    snapshots = {}

    def keep(metrics):
        snapshots[metrics.step] = context.engine.full_model_state()

    with pytest.raises(NonFiniteError, match="at step 2; no optimizer step was taken"):
        trainer.run_trial(0, on_step=keep)
    assert sorted(snapshots) == [0, 1]
    after = context.engine.full_model_state()
    assert all(torch.equal(after[k], v) for k, v in snapshots[1].items())
    assert not all(torch.equal(snapshots[0][k], v) for k, v in snapshots[1].items())


def test_ranks_build_one_model_but_draw_their_own_dropout():
    import torch

    from mtb.context import RunContext
    from mtb.seeding import seed_training
    from mtb.trainer import build_model

    cfg = config.resolve(flags={"preset": "tiny", "model": {"dropout": 0.5}})
    models, masks = [], []
    for rank in (0, 1, 1):
        context = RunContext(cfg, rank=rank, world_size=2, device=torch.device("cpu"))
        models.append(build_model(context).state_dict())
        seed_training(context)
        masks.append(torch.nn.functional.dropout(torch.ones(256), 0.5))
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])
    assert not torch.equal(masks[0], masks[1])
    assert torch.equal(masks[1], masks[2])  # a rank's stream is reproducible


def test_float_strategy_options_refuse_nan_and_infinity():
    option = StrategyOption("ratio", float, 0.5, help="a ratio")
    for value in (math.nan, math.inf):
        with pytest.raises(ConfigError, match=r"^strategy_options.ratio: must be a finite number"):
            option.coerce(value)


class WholeStep(Strategy):
    """An engine that owns the step's micro-batch loop: one forward over all of them."""

    name = "whole-step"
    max_world_size = 1

    def setup(self, model, make_optimizer, context):
        import torch

        from mtb.engine import Engine

        class WholeStepEngine(Engine):
            def forward_backward(self, batches, hooks):
                inputs = torch.cat([b.inputs for b in batches])
                targets = torch.cat([b.targets for b in batches])
                with hooks.range("mtb.forward_backward"):
                    loss = hooks.on_loss(self.model(inputs, targets), 0)
                    loss.backward()
                return loss.detach()

            def forward(self, batch):
                raise AssertionError("the trainer must not drive micro-batches itself")

        return WholeStepEngine(model, make_optimizer(model.parameters()), context)


class WholeStepPlugin:
    @hookimpl
    def mtb_register_strategies(self, register):
        register(WholeStep())


@pytest.fixture
def whole_step(pm):
    pm.register(WholeStepPlugin(), name="whole-step")
    yield pm
    pm.unregister(name="whole-step")


@pytest.mark.slow
def test_an_engine_that_owns_the_step_loop_trains_like_the_trainers_loop(
    whole_step, invoke, tmp_path
):
    accumulated = ["--micro-batch-size", "1", "--grad-accum-steps", "2"]
    args = ["run", *TINY, "--warmup-steps", "0", "--lr", "1e-2"]
    assert invoke(*args, *accumulated, "--output", tmp_path / "loop.json").exit_code == 0
    whole = invoke(*args, *accumulated, "--strategy", "whole-step", "--output", tmp_path / "w.json")
    assert whole.exit_code == 0, whole.output
    losses = [
        [s["loss"] for s in read_json(tmp_path / f"{n}.json")["trials"][0]["steps"]]
        for n in ("loop", "w")
    ]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    poisoned = invoke(*args, "--strategy", "whole-step", "--inject-nan-at-step", "1")
    assert poisoned.exit_code == 1
    assert "non-finite loss on rank(s) 0 at step 1" in poisoned.output
