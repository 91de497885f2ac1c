"""Model presets: named GPT shapes from a test-sized model to a 2.6B stress model.

Parameter counts (tied embeddings, learned positions, biases, LayerNorms):
tiny 0.03M, small 23.2M, medium 168.5M, large 731.1M, stress 2.60B; the MoE twins
tiny-moe 0.06M and small-moe 42.1M (the dense active parameters per token, plus routers);
tiny-long 0.16M, tiny with 4096-token sequences, where activations outweigh the weights
(for context parallelism).
"""

#: the MoE layers of tiny-moe and small-moe: 4 experts, top-1 (the active parameters of
#: their dense twins), every second block (Switch Transformer)
MOE = {"moe_experts": 4, "moe_top_k": 1, "moe_every": 2}

PRESETS: dict[str, dict] = {
    "tiny": {"vocab_size": 256, "d_model": 32, "n_heads": 2, "n_layers": 2, "seq_len": 32},
    "small": {"vocab_size": 8192, "d_model": 512, "n_heads": 8, "n_layers": 6, "seq_len": 256},
    "medium": {"vocab_size": 16384, "d_model": 1024, "n_heads": 16, "n_layers": 12, "seq_len": 512},
    "large": {"vocab_size": 32768, "d_model": 1536, "n_heads": 16, "n_layers": 24, "seq_len": 512},
    "stress": {
        "vocab_size": 32768,
        "d_model": 2560,
        "n_heads": 32,
        "n_layers": 32,
        "seq_len": 1024,
    },
    "tiny-moe": {
        "vocab_size": 256,
        "d_model": 32,
        "n_heads": 2,
        "n_layers": 2,
        "seq_len": 32,
        **MOE,
    },
    "tiny-long": {"vocab_size": 256, "d_model": 32, "n_heads": 2, "n_layers": 2, "seq_len": 4096},
    "small-moe": {
        "vocab_size": 8192,
        "d_model": 512,
        "n_heads": 8,
        "n_layers": 6,
        "seq_len": 256,
        **MOE,
    },
}
