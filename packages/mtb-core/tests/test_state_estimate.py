"""The analytic parameters per rank under tp and pp, MoE blocks included, and the flag a
model-state estimate gets when it misses the measurement by more than 10 %."""

import pytest

from mtb.config import resolve
from mtb.console import _estimate
from mtb.model import GPT, parameter_count, rank_parameter_count
from mtb.results import estimate_error


def model_config(preset: str, **changes):
    return resolve({"preset": preset, "model": changes}).model


def held_by_tp_rank(cfg, tp: int) -> int:
    """What one tp rank holds, counted from the module tree by the rule tp applies: the
    attention's and a dense MLP's weights and column-split biases by tp, the rest whole."""
    split = ("attn.qkv.", "attn.proj.weight", "mlp.fc.", "mlp.proj.weight", "tok_emb.")
    total = 0
    for name, param in GPT(cfg).named_parameters():
        total += param.numel() // tp if any(part in name for part in split) else param.numel()
    return total


@pytest.mark.parametrize(
    ("preset", "changes"),
    [("tiny", {}), ("tiny-moe", {}), ("tiny-moe", {"moe_every": 1}), ("small-moe", {})],
)
def test_a_tp_rank_holds_what_the_formula_says(preset, changes):
    cfg = model_config(preset, **changes)
    assert rank_parameter_count(cfg, 1, 1) == parameter_count(cfg)
    assert rank_parameter_count(cfg, 2, 1) == held_by_tp_rank(cfg, 2)


def test_moe_blocks_keep_their_experts_whole_on_each_tp_rank():
    dense, moe = model_config("tiny-moe", moe_experts=0), model_config("tiny-moe", moe_every=1)
    experts = moe.n_layers * (2 * moe.d_model * 4 * moe.d_model * moe.moe_experts)
    gap = rank_parameter_count(moe, 2, 1) - rank_parameter_count(dense, 2, 1)
    assert gap > experts // 2  # the experts are not divided by tp


def test_each_pipeline_stage_holds_its_own_blocks():
    cfg = model_config("tiny-moe", n_layers=3, moe_every=2)
    # stage 0: blocks 0 and 1 and the embeddings; stage 1: block 2, the final norm, the head
    whole = rank_parameter_count(cfg, 1, 2)
    assert whole == max(
        sum(p.numel() for n, p in GPT(cfg).named_parameters() if n.startswith(prefixes))
        for prefixes in (
            ("tok_emb", "pos_emb", "blocks.0.", "blocks.1."),
            ("blocks.2.", "ln_f", "tok_emb"),  # the tied head: a copy of the embedding
        )
    )


def summary(measured: int, estimate: int) -> dict:
    error = estimate_error(measured, estimate)
    return {
        "model_state_estimate_bytes": {"total": estimate},
        "model_state_estimate_error": error,
        "model_state_estimate_off": abs(error) > 0.10,
    }


def test_an_estimate_more_than_ten_percent_off_is_flagged_in_the_table():
    assert _estimate(summary(782_188, 289_280)) == "0.3 MiB (off by -63%: see docs/metrics.md)"
    assert "off by" not in _estimate(summary(782_188, 782_000))
