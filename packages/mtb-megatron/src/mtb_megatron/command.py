"""The exact command of one topology: torchrun around ``pretrain_gpt.py`` (mock data or a dataset).

torchrun is started as ``python -m torch.distributed.run`` with this
interpreter, so the torch that launches is the torch the provenance records.
"""

import shlex
import sys

from mtb_megatron import dataset
from mtb_megatron.config import MegatronConfig
from mtb_megatron.topology import Topology

#: set for every launch: Megatron's tensor-parallel overlap needs one CUDA connection;
#: unbuffered output keeps the log lines in order with the failure that follows them
ENVIRONMENT = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONUNBUFFERED": "1"}
PRECISION_FLAGS = {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp32": []}


def torchrun_args(config: MegatronConfig) -> list[str]:
    """torchrun's own options from core's launch settings (one node: --standalone)."""
    launch = config.launch
    args = [sys.executable, "-m", "torch.distributed.run"]
    if launch.nnodes == 1 and not launch.rdzv_endpoint:
        args += ["--standalone", "--nnodes", "1"]
    else:
        args += ["--nnodes", str(launch.nnodes), "--node-rank", str(launch.node_rank)]
        args += ["--rdzv-backend", "c10d", "--rdzv-endpoint", launch.rdzv_endpoint]
        args += ["--rdzv-id", launch.rdzv_id]
    args += ["--nproc-per-node", str(launch.nproc_per_node)]
    if launch.max_restarts:
        args += ["--max-restarts", str(launch.max_restarts)]
    return args


def megatron_args(config: MegatronConfig, topology: Topology, cache_dir: str) -> list[str]:
    """pretrain_gpt.py's arguments: the topology, the model, the batches, the data (its
    index cache in ``cache_dir``)."""
    args = [
        "--tensor-model-parallel-size", str(topology.tp),
        "--pipeline-model-parallel-size", str(topology.pp),
        "--num-layers", str(config.num_layers),
        "--hidden-size", str(config.hidden_size),
        "--num-attention-heads", str(config.num_attention_heads),
        "--seq-length", str(config.seq_length),
        "--max-position-embeddings", str(config.seq_length),
        "--micro-batch-size", str(config.micro_batch_size),
        "--global-batch-size", str(config.global_batch_size),
        "--train-iters", str(config.train_iters),
        "--log-interval", str(config.log_interval),
        "--lr", repr(config.lr),
        "--seed", str(config.seed),
        "--transformer-impl", config.transformer_impl,
        *dataset.megatron_flags(config, cache_dir),
        "--tokenizer-type", "NullTokenizer",
        "--vocab-size", str(config.vocab_size),
        "--eval-iters", "0",
        *PRECISION_FLAGS[config.precision],
    ]  # fmt: skip
    if config.log_throughput:
        args.append("--log-throughput")
    if sequence_parallel(config, topology):
        args.append("--sequence-parallel")
    return args


def sequence_parallel(config: MegatronConfig, topology: Topology) -> bool:
    """Transformer Engine with TP > 1 splits norms and dropout over the sequence too; the
    PyTorch fallback runs without it (and with TP 1 there is nothing to split over)."""
    return config.transformer_impl == "transformer_engine" and topology.tp > 1


def build(config: MegatronConfig, topology: Topology, script: str, cache_dir: str) -> list[str]:
    """The whole argv of one launch."""
    return [*torchrun_args(config), script, *megatron_args(config, topology, cache_dir)]


def shell_line(argv: list[str], cwd: str) -> str:
    """The launch as one shell line a user can paste: cd, the variables, the command."""
    variables = " ".join(f"{k}={shlex.quote(v)}" for k, v in ENVIRONMENT.items())
    return f"cd {shlex.quote(cwd)} && {variables} {shlex.join(argv)}"
