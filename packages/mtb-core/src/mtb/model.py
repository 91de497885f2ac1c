"""A GPT-like decoder: pre-LayerNorm blocks, causal SDPA attention, GELU MLP.

The same module is what every strategy wraps, so its shape alone decides the
FLOPs and parameter counts used for MFU (see ``flops_per_token``).
"""

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from mtb.config import ModelConfig
from mtb.layout import stage_layers
from mtb.moe import MoE, checkpoint_contexts


def causal_attention(q, k, v, dropout: float) -> torch.Tensor:
    """Causal softmax attention of a whole sequence (heads on dim 1), as SDPA computes it."""
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)


class CausalSelfAttention(nn.Module):
    """``attend`` is the attention kernel: context parallelism swaps in a ring over the cp
    ranks, each holding chunks of the sequence."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.head_dim = cfg.d_model // cfg.n_heads
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attend = causal_attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``qkv`` holds each head's q, k and v rows together (Megatron-LM's order).

        So a contiguous split of its rows is a split by heads: a tensor-parallel
        shard runs its own heads, counted from the shard's output.
        """
        batch, seq, _ = x.shape
        qkv = self.qkv(x).view(batch, seq, -1, 3, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(3))
        dropout = self.dropout if self.training else 0.0
        y = self.attend(q, k, v, dropout)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        hidden = cfg.mlp_ratio * cfg.d_model
        self.fc = nn.Linear(cfg.d_model, hidden)
        self.proj = nn.Linear(hidden, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """One transformer block; strategies wrap or shard at this granularity."""

    def __init__(self, cfg: ModelConfig, moe: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MoE(cfg) if moe else MLP(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        self.checkpointing = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.checkpointing and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False, context_fn=checkpoint_contexts)
        return self._forward(x)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    """Token + learned position embeddings, N blocks, final LayerNorm, LM head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, cfg.is_moe_block(i)) for i in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.tok_emb.weight
        #: the positions of the tokens this rank holds; None: 0..seq-1 (set under cp)
        self.positions: torch.Tensor | None = None
        self.apply(self._init_weights)
        residual_std = 0.02 / math.sqrt(2 * cfg.n_layers)
        for block in self._blocks():
            nn.init.normal_(block.attn.proj.weight, std=residual_std)
            if isinstance(block.mlp, MoE):
                nn.init.normal_(block.mlp.w1, std=0.02)
                nn.init.normal_(block.mlp.w2, std=residual_std)
            else:
                nn.init.normal_(block.mlp.proj.weight, std=residual_std)

    def moe_layers(self) -> list[MoE]:
        """The MoE layers, in block order (none in a dense model)."""
        return [block.mlp for block in self._blocks() if isinstance(block.mlp, MoE)]

    def _blocks(self) -> list[Block]:
        """The blocks, typed (ModuleList yields plain Modules)."""
        return cast("list[Block]", list(self.blocks))

    def set_activation_checkpointing(self, enabled: bool) -> None:
        """Recompute each block's activations in backward instead of storing them."""
        for block in self._blocks():
            block.checkpointing = enabled

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits, or the mean next-token cross-entropy when targets are given.

        With MoE layers the loss adds their weighted router losses.
        """
        x = self.drop(self.tok_emb(tokens) + self.pos_emb(positions_of(self.positions, tokens)))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        for layer in self.moe_layers():
            if layer.aux_loss is not None:  # set by the layer's forward just run
                loss = loss + layer.aux_loss
        return loss


def positions_of(positions: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
    """The position ids of ``tokens``: the ones a context-parallel rank was given, or 0..S-1."""
    if positions is not None:
        return positions
    return torch.arange(tokens.shape[1], device=tokens.device)


def _ffn_parameters(cfg: ModelConfig, index: int, active: bool = False) -> int:
    """Feed-forward weights of block ``index``: an MLP, or router plus experts.

    ``active``: the matmul weights one token passes through (top-k experts).
    """
    d, hidden = cfg.d_model, cfg.mlp_ratio * cfg.d_model
    if not cfg.is_moe_block(index):
        return 2 * d * hidden + (0 if active else hidden + d)
    experts = cfg.moe_top_k if active else cfg.moe_experts
    return d * cfg.moe_experts + experts * 2 * d * hidden


def expert_parameter_count(cfg: ModelConfig) -> int:
    """Parameters of the experts of every MoE layer (what expert parallelism shards)."""
    per_layer = 2 * cfg.d_model * cfg.mlp_ratio * cfg.d_model * cfg.moe_experts
    return per_layer * sum(cfg.is_moe_block(i) for i in range(cfg.n_layers))


def parameter_count(cfg: ModelConfig) -> int:
    """Trainable parameters, computed from the shape (tied weights counted once)."""
    d = cfg.d_model
    attention = 3 * d * d + 3 * d + d * d + d
    blocks = sum(attention + 4 * d + _ffn_parameters(cfg, i) for i in range(cfg.n_layers))
    head = 0 if cfg.tie_embeddings else cfg.vocab_size * d
    return cfg.vocab_size * d + cfg.seq_len * d + blocks + 2 * d + head


def rank_parameter_count(cfg: ModelConfig, tp: int = 1, pp: int = 1) -> int:
    """Parameters the fullest rank holds under tensor and pipeline parallelism, before dp sharding.

    Tensor parallelism splits q/k/v, the MLP's up projection (weights and
    biases), both output projections' weights and the token embedding and
    head by vocabulary rows; biases after a row split, the norms and the
    position embedding stay whole. An MoE block's router and experts stay
    whole on every tp rank (tensor parallelism splits its attention only).
    A pipeline stage holds its blocks (the first stages one more when they
    do not divide), the first stage the embeddings, the last the final norm
    and the head (a tied head is a copy there once the stages differ).
    Without either, every parameter (an MoE model's experts included).
    """
    if tp == pp == 1:
        return parameter_count(cfg)
    vocabulary = cfg.vocab_size * cfg.d_model // tp
    embeddings = vocabulary + cfg.seq_len * cfg.d_model
    head = 2 * cfg.d_model + (0 if cfg.tie_embeddings and pp == 1 else vocabulary)
    held = [
        sum(_rank_block_parameters(cfg, i, tp) for i in blocks)
        for blocks in stage_layers(cfg.n_layers, pp)
    ]
    held[0] += embeddings
    held[-1] += head
    return max(held)


def _rank_block_parameters(cfg: ModelConfig, index: int, tp: int) -> int:
    """What one tp rank holds of block ``index``: its split linears' share, the rest whole."""
    d, hidden = cfg.d_model, cfg.mlp_ratio * cfg.d_model
    attention, norms = 3 * d * d + 3 * d + d * d, 4 * d
    if cfg.is_moe_block(index):
        return attention // tp + d + norms + _ffn_parameters(cfg, index)
    mlp = d * hidden + hidden + hidden * d
    return (attention + mlp) // tp + 2 * d + norms


def matmul_parameter_count(cfg: ModelConfig) -> int:
    """Weights that take part in a matmul per token: block linears and the LM head.

    In an MoE layer: the router and the top-k experts a token is routed to.
    """
    d = cfg.d_model
    ffn = sum(_ffn_parameters(cfg, i, active=True) for i in range(cfg.n_layers))
    return cfg.n_layers * 4 * d * d + ffn + cfg.vocab_size * d


def largest_linear(cfg: ModelConfig, tokens: int) -> tuple[int, int, int]:
    """(tokens, in features, out features) of the linear layer with the most FLOPs."""
    d, hidden = cfg.d_model, cfg.mlp_ratio * cfg.d_model
    layers = [(d, 3 * d), (d, d), (d, hidden), (hidden, d), (d, cfg.vocab_size)]
    inputs, outputs = max(layers, key=lambda layer: layer[0] * layer[1])
    return tokens, inputs, outputs


def flops_per_token(cfg: ModelConfig) -> int:
    """Training FLOPs per token, PaLM's formula as torchtitan computes it.

    6 x matmul parameters (forward + backward) plus 12 x layers x heads x
    head_dim x seq for the attention score and value matmuls, without a
    discount for the causal mask.
    """
    head_dim = cfg.d_model // cfg.n_heads
    attention = 12 * cfg.n_layers * cfg.n_heads * head_dim * cfg.seq_len
    return 6 * matmul_parameter_count(cfg) + attention
