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
