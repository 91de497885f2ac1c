"""The workload in numbers: FLOPs, GEMM shapes, element-wise bytes and activations of one step.

Everything here follows mtb's GPT (``mtb.api.GPT``): pre-norm blocks of
causal self-attention (one fused q/k/v projection, scaled-dot-product
attention, an output projection) and an MLP (``mlp_ratio`` x d_model, GELU),
learned positions, a final norm and a head tied to the token embedding.
Tensor parallelism splits it as Megatron-LM does (q/k/v and the MLP's first
linear by columns, the two output projections by rows, the embedding and head
by vocabulary rows); sequence parallelism runs the norms on sequence shards.
All counts are for one micro-batch of ``b`` sequences on one rank.
"""

import attrs

#: bytes of one activation element at each precision (autocast keeps bf16/fp16 activations)
ACTIVATION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
PRECISIONS = tuple(ACTIVATION_BYTES)


@attrs.frozen(kw_only=True)
class Workload:
    """One training step's shape: the model, the global batch and the numerics."""

    preset: str
    vocab_size: int
    d_model: int
    n_heads: int
    n_layers: int
    seq_len: int
    mlp_ratio: int = 4
    moe_experts: int = 0
    moe_top_k: int = 1
    moe_every: int = 1
    global_batch: int
    precision: str = "fp32"
    optimizer: str = "adamw"
    #: model settings given besides the preset (``mtb run --d-model 64``), as (field, value)
    overrides: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(
        cls, preset: str, global_batch: int, precision: str, optimizer: str, overrides=()
    ) -> "Workload":
        """The preset's model shape (as ``mtb run --preset`` resolves it) with this batch."""
        from mtb.api import resolve_config

        overrides = tuple(sorted(dict(overrides).items()))
        model = resolve_config(flags={"preset": preset, "model": dict(overrides)}).model
        shape = {field: getattr(model, field) for field in SHAPE_FIELDS}
        return cls(
            preset=preset,
            global_batch=global_batch,
            precision=precision,
            optimizer=optimizer,
            overrides=overrides,
            **shape,
        )

    @property
    def hidden(self) -> int:
        return self.mlp_ratio * self.d_model

    @property
    def element_bytes(self) -> int:
        return ACTIVATION_BYTES[self.precision]

    @property
    def moe_layers(self) -> int:
        """Blocks whose MLP is a mixture of experts (the last of every ``moe_every``)."""
        return self.n_layers // self.moe_every if self.moe_experts else 0

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len

    def gemm_shapes(self, micro_batch: int, tp: int = 1) -> list[tuple[str, int, int, int]]:
        """(name, m, k, n) of every GEMM of one dense block and of the head, on one tp rank."""
        tokens, d = micro_batch * self.seq_len, self.d_model
        return [
            ("qkv", tokens, d, 3 * d // tp),
            ("attention_out", tokens, d // tp, d),
            ("mlp_up", tokens, d, self.hidden // tp),
            ("mlp_down", tokens, self.hidden // tp, d),
            ("head", tokens, d, self.vocab_size // tp),
        ]

    def block_matmul_flops(self, micro_batch: int, tp: int = 1, cp: int = 1) -> float:
        """Forward FLOPs of one dense block's GEMMs and attention on one rank."""
        linear = sum(2 * m * k * n for name, m, k, n in self.gemm_shapes(micro_batch, tp)[:4])
        return (linear + self.attention_flops(micro_batch, tp)) / cp

    def attention_flops(self, micro_batch: int, tp: int = 1) -> float:
        """Q·Kᵀ and P·V of causal attention: half of the full s x s products."""
        return 2 * micro_batch * self.seq_len**2 * self.d_model / tp

    def head_matmul_flops(self, micro_batch: int, tp: int = 1) -> float:
        """Forward FLOPs of the head (logits over the vocabulary)."""
        _, m, k, n = self.gemm_shapes(micro_batch, tp)[-1]
        return 2 * m * k * n

    def block_elementwise_bytes(self, micro_batch: int, tp: int = 1, sp: bool = False) -> float:
        """Bytes element-wise operators read and write in one block's forward.

        Two layer norms and two residual adds on the (sequence-sharded under
        sp) hidden states, GELU on the MLP's hidden width, and the softmax
        statistics of attention.
        """
        tokens = micro_batch * self.seq_len
        norm_tokens = tokens // tp if sp else tokens
        hidden_states = norm_tokens * self.d_model * (2 * 2 + 2 * 3)
        gelu = 2 * tokens * self.hidden // tp
        softmax = 3 * tokens * self.d_model // tp
        return (hidden_states + gelu + softmax) * self.element_bytes

    def head_elementwise_bytes(self, micro_batch: int) -> float:
        """Embedding lookups, the final norm and the loss (softmax over whole logits)."""
        tokens = micro_batch * self.seq_len
        return tokens * (6 * self.d_model + 3 * self.vocab_size) * 4

    def block_activation_bytes(
        self, micro_batch: int, tp: int = 1, sp: bool = False, cp: int = 1
    ) -> float:
        """Bytes one block saves for backward on one rank (autograd's saved tensors).

        Per token: the norms' inputs and outputs and statistics (4d + 4, split
        by tp under sp), q/k/v, the attention output and its log-sum-exp
        (4d/tp + heads/tp), the MLP's pre- and post-GELU hidden states (8d/tp).
        At tp 1 this is 16d + 4 + heads per token, which equals what
        ``SavedActivations`` counts on mtb's model.
        """
        tokens = micro_batch * self.seq_len / cp
        d, heads = self.d_model, self.n_heads
        replicated = (4 * d + 4) / (tp if sp else 1)
        split = (4 * d + heads + 2 * self.hidden) / tp
        return tokens * (replicated + split) * self.element_bytes

    def head_activation_bytes(self, micro_batch: int, cp: int = 1) -> float:
        """Embedding output, final norm, logits and the loss's saved values, per rank."""
        tokens = micro_batch * self.seq_len / cp
        return tokens * (2 * self.d_model + self.vocab_size + 6) * self.element_bytes + 4


#: the model fields a workload copies from the resolved preset
SHAPE_FIELDS = (
    "vocab_size",
    "d_model",
    "n_heads",
    "n_layers",
    "seq_len",
    "mlp_ratio",
    "moe_experts",
    "moe_top_k",
    "moe_every",
)
