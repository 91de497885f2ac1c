"""Every flag the runner passes to pretrain_gpt.py is one Megatron-LM's parser defines, at both
releases mtb runs: core_v0.18.2 (the megatron image) and core_v0.16.1 (the CPU machines).

Where each flag is defined, read from the two tags' sources: an explicit ``add_argument`` in
megatron/training/arguments.py, or a field of a config dataclass that arguments.py turns
into flags (``ArgumentGroupFactory``): mpc = megatron/core/model_parallel_config.py, tc =
megatron/core/transformer/transformer_config.py, training = megatron/training/
training_config.py (0.16.1) or megatron/training/config/training_config.py (0.18.2),
common = common_config.py beside it. Both tags' ``parse_args`` and ``validate_args``
accepted the mock-data and the dataset command of a 1x1 topology on CPU; with TP 2 the
validation reaches a GPU query (and needs CUDA_DEVICE_MAX_CONNECTIONS=1, which every
launch sets). A flag added to the runner must be looked up and added here.
"""

import pytest
from test_command import CACHE, SCRIPT, config

from mtb_megatron import command
from mtb_megatron.command import ENVIRONMENT

DEFINED = {
    "--tensor-model-parallel-size": ("mpc:20", "mpc:20"),
    "--pipeline-model-parallel-size": ("mpc:28", "mpc:28"),
    "--sequence-parallel": ("mpc:39", "mpc:39"),
    "--fp16": ("mpc:106", "mpc:101"),
    "--bf16": ("mpc:109", "mpc:104"),
    "--num-layers": ("tc:45", "tc:64"),
    "--hidden-size": ("tc:104", "tc:132"),
    "--num-attention-heads": ("tc:107", "tc:135"),
    "--transformer-impl": ("tc:880", "tc:1111"),
    "--micro-batch-size": ("training:10", "training:12"),
    "--global-batch-size": ("training:14", "training:16"),
    "--train-iters": ("training:46", "training:65"),
    "--eval-iters": ("training:94", "training:116"),
    "--log-interval": ("training:202", "training:248"),
    "--log-throughput": ("training:208", "training:254"),
    "--seed": ("common:8", "common:10"),
    "--vocab-size": ("arguments:2373", "training:627"),
    "--tokenizer-type": ("arguments:2386", "training:646"),
    "--max-position-embeddings": ("arguments:1642", "arguments:2119"),
    "--lr": ("arguments:2130", "arguments:2638"),
    "--data-path": ("arguments:2431", "arguments:2870"),
    "--split": ("arguments:2443", "arguments:2881"),
    "--data-cache-path": ("arguments:2474", "arguments:2912"),
    "--mock-data": ("arguments:2479", "arguments:2917"),
    "--seq-length": ("arguments:2482", "arguments:2920"),
}


def flags(argv: list[str]) -> set[str]:
    after = argv[argv.index(SCRIPT) + 1 :]
    return {arg for arg in after if arg.startswith("--")}


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_every_flag_of_every_command_is_defined_by_both_releases(tmp_path, precision):
    prefix = tmp_path / "corpus_text_document"
    for suffix in (".idx", ".bin"):
        prefix.with_name(prefix.name + suffix).write_bytes(b"")
    for data in ("", str(prefix)):
        cfg = config(precision=precision, data=data, transformer_impl="transformer_engine")
        for topology in cfg.topologies:
            passed = flags(command.build(cfg, topology, SCRIPT, CACHE))
            assert passed <= DEFINED.keys(), passed - DEFINED.keys()


def test_tensor_parallel_launches_set_what_validate_args_asserts():
    assert ENVIRONMENT["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
