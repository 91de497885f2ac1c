"""The MoE router and layer in one process: tie-breaking, routing per sequence, losses, sizes."""

import pytest
import torch

from mtb.config import ModelConfig
from mtb.model import GPT, matmul_parameter_count, parameter_count
from mtb.moe import load_balancing_loss, route, z_loss
from mtb.presets import PRESETS

pytestmark = pytest.mark.timeout(60)


def test_ties_go_to_the_lower_expert_id():
    routing = route(torch.zeros(2, 5, 4), top_k=2, capacity_factor=None)
    assert routing.experts.tolist() == [[[0, 1]] * 5] * 2
    assert routing.gates.flatten().tolist() == [0.5] * 20


def test_a_sequence_routes_alike_whatever_else_is_in_the_batch():
    logits = torch.randn(4, 16, 4, generator=torch.Generator().manual_seed(3))
    whole = route(logits, 2, 1.0)
    halves = [route(part, 2, 1.0) for part in logits.split(2)]
    assert whole.dropped > 0
    assert torch.equal(whole.kept, torch.cat([h.kept for h in halves]))
    assert torch.equal(whole.experts, torch.cat([h.experts for h in halves]))


def test_load_balancing_loss_is_one_when_uniform_and_experts_when_collapsed():
    uniform = route(torch.zeros(1, 8, 4), 1, None)
    uniform.experts = torch.arange(8).remainder(4).view(1, 8, 1)
    assert float(load_balancing_loss(uniform)) == pytest.approx(1.0)
    collapsed = torch.zeros(1, 8, 4)
    collapsed[..., 0] = 30.0
    assert float(load_balancing_loss(route(collapsed, 1, None))) == pytest.approx(4.0)


def test_z_loss_is_the_mean_squared_log_partition():
    logits = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    expected = (torch.log(torch.tensor(2.0)) ** 2 + (1 + torch.log(torch.tensor(2.0))) ** 2) / 2
    assert float(z_loss(logits)) == pytest.approx(float(expected))


@pytest.mark.parametrize(
    "moe", [{"moe_experts": 4}, {"moe_experts": 8, "moe_top_k": 2, "moe_every": 2}]
)
def test_parameter_counts_follow_the_module(moe):
    cfg = ModelConfig(**{**PRESETS["tiny"], **moe})
    model = GPT(cfg)
    assert parameter_count(cfg) == sum(p.numel() for p in model.parameters())


def test_tiny_moe_has_the_active_matmul_parameters_of_tiny_plus_its_router():
    dense, sparse = ModelConfig(**PRESETS["tiny"]), ModelConfig(**PRESETS["tiny-moe"])
    router = sparse.d_model * sparse.moe_experts
    assert matmul_parameter_count(sparse) == matmul_parameter_count(dense) + router


def test_router_losses_join_the_training_loss():
    cfg = ModelConfig(**{**PRESETS["tiny-moe"], "moe_z_loss_coef": 1.0})
    torch.manual_seed(0)
    model = GPT(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
    with torch.no_grad():
        loss = model(tokens, tokens)
        logits = model(tokens)
    plain = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
    (layer,) = model.moe_layers()
    assert float(loss) == pytest.approx(float(plain + layer.aux_loss), rel=1e-6)
    assert float(layer.aux_loss) > 1.0  # the z-loss of 4 near-equal logits is about log(4)^2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--moe-top-k", "8"], "model.moe_top_k: 8 must be <= model.moe_experts=4"),
        (["--moe-capacity-factor", "0"], "model.moe_capacity_factor: must be > 0, got 0.0"),
        (["--moe-every", "3"], "model.moe_every: 3 leaves no MoE layer"),
    ],
)
def test_bad_moe_settings_are_one_line(invoke, args, message):
    result = invoke("run", "--preset", "tiny-moe", *args, "--print-config")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output


def test_a_dense_fingerprint_leaves_the_moe_fields_out():
    from mtb import config

    dense = config.resolve(flags={"preset": "tiny"})
    assert not any("moe" in key for key in config.fingerprint_fields(dense)["model"])
    sparse = config.resolve(flags={"preset": "tiny-moe"})
    assert config.fingerprint_fields(sparse)["model"]["moe_experts"] == 4
    assert config.fingerprint(sparse) != config.fingerprint(dense)


def test_the_moe_model_trains_under_bf16_autocast():
    torch.manual_seed(0)
    model = GPT(ModelConfig(**PRESETS["tiny-moe"]))
    tokens = torch.randint(0, 256, (2, 32))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(tokens, tokens)
    loss.backward()
    assert torch.isfinite(loss) and model.moe_layers()[0].w1.grad is not None


@pytest.mark.parametrize(
    ("checkpointing", "early_stop"), [(False, True), (True, True), (True, False)]
)
def test_routing_is_counted_once_per_forward_with_or_without_recompute(checkpointing, early_stop):
    """Activation checkpointing runs each block's forward again in backward (all of it when
    torch's early stop is off); the routing of that recompute is not a second batch of tokens."""
    from torch.utils.checkpoint import set_checkpoint_early_stop

    from mtb.moe import take_step

    cfg = ModelConfig(**PRESETS["tiny-moe"])
    model = GPT(cfg)
    model.set_activation_checkpointing(checkpointing)
    tokens = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
    with set_checkpoint_early_stop(early_stop):
        model(tokens, tokens).backward()
    step = take_step(model.moe_layers())
    assert step["assigned"] == 2 * cfg.seq_len * cfg.moe_top_k
    assert sum(step["tokens_per_expert"][0]) <= step["assigned"]
