"""Config: precedence, validation messages naming the field, (un)structuring."""

import pytest

from mtb import config
from mtb.errors import ConfigError


def error_of(file_values=None, flags=None) -> str:
    with pytest.raises(ConfigError) as caught:
        config.resolve(file_values, flags)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_defaults_use_the_small_preset():
    cfg = config.resolve()
    assert cfg.preset == "small"
    assert (cfg.model.vocab_size, cfg.model.d_model, cfg.model.n_heads) == (8192, 512, 8)
    assert (cfg.model.n_layers, cfg.model.seq_len, cfg.model.tie_embeddings) == (6, 256, True)


def test_flags_override_file_which_overrides_preset():
    file_values = {"preset": "tiny", "model": {"d_model": 64}, "training": {"steps": 7}}
    flags = {"training": {"steps": 9, "lr": None}, "model": {"n_layers": 3}}
    cfg = config.resolve(file_values, flags)
    assert cfg.model.d_model == 64  # file beats preset
    assert cfg.model.n_layers == 3  # flag beats preset
    assert cfg.training.steps == 9  # flag beats file
    assert cfg.training.lr == 3e-4  # None means "not given"
    assert cfg.model.vocab_size == 256  # preset


def test_d_model_must_divide_by_heads():
    message = error_of(flags={"preset": "tiny", "model": {"d_model": 33}})
    assert message == "model.d_model: 33 must be divisible by model.n_heads=2"


def test_steps_below_one_is_refused():
    assert error_of({"training": {"steps": 0}}) == "training.steps: must be >= 1, got 0"


def test_unknown_precision_lists_allowed_values():
    message = error_of({"training": {"precision": "fp8"}})
    assert message == "training.precision: 'fp8' is not one of: fp32, bf16, fp16"


def test_unknown_keys_are_rejected_by_name():
    assert error_of({"model": {"d_modle": 3}}).startswith("model.d_modle: unknown key; allowed:")
    assert error_of({"stepz": 3}).startswith("stepz: unknown key; allowed: strategy,")


def test_wrong_types_name_the_field():
    assert error_of({"training": {"steps": "ten"}}) == (
        "training.steps: expected an integer, got 'ten'"
    )
    assert error_of({"model": {"tie_embeddings": "yes"}}) == (
        "model.tie_embeddings: expected true or false, got 'yes'"
    )
    assert error_of({"training": "fast"}) == "training: must be a table of settings"


def test_unknown_preset_and_launch_rules():
    assert error_of({"preset": "huge"}).startswith("preset: 'huge' is not one of: tiny, small")
    assert error_of({"launch": {"nnodes": 2}}) == (
        "launch.rdzv_endpoint: HOST:PORT is required when nnodes > 1"
    )
    assert error_of({"launch": {"nnodes": 2, "node_rank": 2, "rdzv_endpoint": "h:1"}}) == (
        "launch.node_rank: must be < launch.nnodes=2"
    )


def test_toml_file_round_trip(tmp_path):
    cfg = config.resolve(flags={"preset": "tiny", "training": {"repeat": 2}})
    path = tmp_path / "run.toml"
    path.write_text(config.to_toml(cfg))
    assert config.resolve(config.load_toml(str(path))) == cfg
    assert config.structure(config.to_dict(cfg)) == cfg


def test_bad_toml_is_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[model\nd_model = 3\n")
    with pytest.raises(ConfigError, match=r"^--config: .*bad.toml is not valid TOML"):
        config.load_toml(str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        config.load_toml(str(tmp_path / "missing.toml"))


def test_fingerprint_covers_workload_not_launch():
    base = config.resolve(flags={"preset": "tiny"})
    same = config.resolve(flags={"preset": "tiny", "output": "x.json", "training": {"steps": 99}})
    other = config.resolve(flags={"preset": "tiny", "training": {"precision": "bf16"}})
    assert config.fingerprint(base) == config.fingerprint(same)
    assert config.fingerprint(base) != config.fingerprint(other)


def test_peak_tflops_must_be_positive():
    assert error_of(flags={"peak_tflops": 0.0}) == "peak_tflops: must be > 0, got 0.0"


def fields_of(kind):
    """(dotted name, field) of every config field whose type is ``kind`` (or ``kind | None``)."""
    import attrs

    classes = [("", config.RunConfig), *((f"{s}.", c) for s, c in config.SECTIONS.items())]
    for prefix, cls in classes:
        for field in attrs.fields(cls):
            if field.type in (kind, kind | None):
                yield prefix + field.name, field


def flags_setting(dotted: str, value) -> dict:
    section, _, name = dotted.rpartition(".")
    return {"preset": "tiny", **({section: {name: value}} if section else {name: value})}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_every_float_setting_refuses_nan_and_infinity(value):
    names = [name for name, _ in fields_of(float)]
    assert {"training.lr", "model.dropout", "launch.timeout_s", "peak_tflops"} <= set(names)
    for name in names:
        message = error_of(flags=flags_setting(name, value))
        assert message == f"{name}: must be a finite number, got {value}"


def test_every_count_has_an_upper_bound_that_is_enforced():
    for name, field in fields_of(int):
        maximum = field.metadata["range"][2]
        assert maximum is not None, f"{name} has no maximum"
        message = error_of(flags=flags_setting(name, maximum + 1))
        assert message == f"{name}: must be <= {maximum}, got {maximum + 1}"


CLI_REFUSALS = [
    (["--lr", "nan"], "training.lr: must be a finite number, got nan"),
    (["--lr", "inf"], "training.lr: must be a finite number, got inf"),
    (["--dropout", "nan"], "model.dropout: must be a finite number, got nan"),
    (["--timeout", "nan"], "launch.timeout_s: must be a finite number, got nan"),
    (["--max-grad-norm", "inf"], "training.max_grad_norm: must be a finite number, got inf"),
    (["--steps", str(10**30)], f"training.steps: must be <= 10000000, got {10**30}"),
    (["--nproc-per-node", "300"], "launch.nproc_per_node: must be <= 256, got 300"),
    (["--seed", str(2**64)], f"data.seed: must be <= {2**63 - 1}, got {2**64}"),
]


@pytest.mark.parametrize(("args", "message"), CLI_REFUSALS)
def test_cli_refuses_non_finite_and_absurd_values_before_launch(invoke, args, message):
    result = invoke("run", "--preset", "tiny", *args, "--print-config")
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: {message}"


TOML_REFUSALS = [
    ("[training]\nlr = nan\n", "training.lr: must be a finite number, got nan"),
    ("[model]\ndropout = inf\n", "model.dropout: must be a finite number, got inf"),
    ("[launch]\ntimeout_s = -inf\n", "launch.timeout_s: must be a finite number, got -inf"),
    ("peak_tflops = nan\n", "peak_tflops: must be a finite number, got nan"),
    ("[training]\nsteps = 1e30\n", f"training.steps: must be <= 10000000, got {int(1e30)}"),
    ("[training]\nsteps = inf\n", "training.steps: expected an integer, got inf"),
]


@pytest.mark.parametrize(("toml", "message"), TOML_REFUSALS)
def test_toml_refuses_non_finite_and_absurd_values_before_launch(invoke, tmp_path, toml, message):
    path = tmp_path / "run.toml"
    path.write_text(toml)
    result = invoke("run", "--preset", "tiny", "--config", path, "--print-config")
    assert result.exit_code == 2
    assert result.output.strip() == f"Error: {message}"


def test_help_states_each_bound(invoke):
    help_text = " ".join(invoke("run", "--help").output.split())
    assert "[default: 10; unit: steps; allowed: 1 to 10000000]" in help_text
    assert "[default: 0.0; allowed: 0.0 to below 1.0]" in help_text


def test_cpu_workers_past_the_cores_warn_and_far_past_them_are_refused():
    from mtb.distributed import cpu_oversubscription
    from mtb.errors import UsageError

    assert cpu_oversubscription(2, cores=2) is None
    assert cpu_oversubscription(3, cores=2) == (
        "3 CPU workers share 2 core(s): timings measure oversubscription, not the strategy"
    )
    with pytest.raises(UsageError, match=r"^launch.nproc_per_node: 9 CPU workers on 2 core\(s\); "):
        cpu_oversubscription(9, cores=2)


def test_cpu_run_far_past_the_cores_is_refused_before_launch(invoke):
    import os

    nproc = 4 * (os.cpu_count() or 1) + 1
    if nproc > config.MAX_RANKS_PER_NODE:
        pytest.skip("more cores than the hard bound of workers per node")
    result = invoke("run", "--preset", "tiny", "--strategy", "single", "--device", "cpu",
                    "--nproc-per-node", nproc)  # fmt: skip
    assert result.exit_code == 2
    assert result.output.strip().startswith(f"Error: launch.nproc_per_node: {nproc} CPU workers")
