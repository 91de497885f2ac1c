"""The settings of ``mtb megatron run|matrix`` and ``mtb megatron topology`` (attrs, validated).

The Megatron settings are the few that decide a GPT benchmark (model size,
sequence, batches, precision, iterations); the launch settings are core's
LaunchConfig, so ``--nproc-per-node``, ``--nnodes`` and ``--timeout`` mean what
they mean for ``mtb run``. The whole config is stored in the result document.
"""

import attrs

from mtb.api import ConfigError, LaunchConfig, setting
from mtb_megatron.topology import Topology

PRECISIONS = ("bf16", "fp16", "fp32")
EVIDENCE = ("compatibility", "performance")
TRANSFORMER_IMPLS = ("auto", "transformer_engine", "local")
#: the Megatron-LM tag of the megatron-core release the megatron image installs (its
#: MEGATRON_CORE, the reference setup's 0.18.2); a checkout at another ref is named with
#: --megatron-ref. The CPU topology checks use constraints.txt's megatron-core 0.16.1.
DEFAULT_REF = "core_v0.18.2"
#: a performance claim needs at least this many repeats of each topology
MIN_PERFORMANCE_REPEATS = 3
OUTPUT_DEFAULT = "results/megatron-<UTC time>.json"


def _output():
    return setting("", help="result JSON path", shown_default=OUTPUT_DEFAULT)


@attrs.define(kw_only=True)
class MegatronConfig:
    """One benchmark of ``pretrain_gpt.py`` (mock data or a dataset) over one or more topologies."""

    megatron_dir: str = setting(
        "", help="Megatron-LM checkout holding pretrain_gpt.py", shown_default="$MEGATRON_DIR"
    )
    megatron_ref: str = setting(
        DEFAULT_REF,
        help="commit, tag or branch the checkout's HEAD must be; the default is the tag of "
        "the megatron image's megatron-core",
    )
    topologies: list[Topology] = attrs.field(factory=lambda: [Topology(1, 1)])
    num_layers: int = setting(12, help="transformer layers", minimum=1)
    hidden_size: int = setting(768, help="hidden size", unit="features", minimum=1)
    num_attention_heads: int = setting(12, help="attention heads", minimum=1)
    seq_length: int = setting(1024, help="sequence length", unit="tokens", minimum=1)
    vocab_size: int = setting(
        32768,
        help="vocabulary of the null tokenizer (with --data: above the dataset's largest id)",
        minimum=2,
    )
    data: str = setting(
        "",
        help="Megatron indexed dataset PREFIX (PREFIX.bin + PREFIX.idx, e.g. from mtb data "
        "prepare) passed as --data-path; checked and its SHA256 recorded before launch",
        shown_default="mock data (--mock-data)",
    )
    micro_batch_size: int = setting(1, help="sequences per rank per micro-step", minimum=1)
    global_batch_size: int = setting(8, help="sequences per iteration, all ranks", minimum=1)
    precision: str = setting("bf16", help="numeric precision", choices=PRECISIONS)
    transformer_impl: str = setting(
        "auto",
        help="Megatron's transformer implementation; auto: transformer_engine where it is "
        "importable, else local (the PyTorch fallback: no sequence parallelism, compatibility "
        "evidence only)",
        choices=TRANSFORMER_IMPLS,
    )
    lr: float = setting(3e-4, help="learning rate", minimum=0.0)
    seed: int = setting(1234, help="Megatron's random seed", minimum=0)
    train_iters: int = setting(50, help="training iterations", minimum=1)
    log_interval: int = setting(10, help="iterations between Megatron's log lines", minimum=1)
    log_throughput: bool = setting(True, help="ask Megatron for TFLOP/s per GPU")
    repeats: int = setting(1, help="launches of each topology", minimum=1)
    evidence: str = setting(
        "compatibility",
        help="what the result may claim: compatibility (it runs) or performance (its numbers)",
        choices=EVIDENCE,
    )
    image: str = setting(
        "",
        help="container image you declare the run uses (name@digest)",
        shown_default="the image's own MTB_IMAGE_* identity",
    )
    memory_sample_interval_s: float = setting(
        0.5, help="seconds between GPU memory samples", unit="s", minimum=0.01
    )
    output: str = _output()
    launch: LaunchConfig = attrs.field(factory=LaunchConfig)

    def __attrs_post_init__(self):
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                "hidden_size",
                f"{self.hidden_size} must be divisible by num_attention_heads="
                f"{self.num_attention_heads}",
            )
        if self.log_interval > self.train_iters:
            raise ConfigError("log_interval", f"must be <= train_iters={self.train_iters}")
        if self.evidence == "performance" and self.repeats < MIN_PERFORMANCE_REPEATS:
            raise ConfigError(
                "repeats",
                f"performance evidence needs at least {MIN_PERFORMANCE_REPEATS} repeats, "
                f"got {self.repeats}",
            )
        for topology in self.topologies:
            self.data_parallel(topology)

    @property
    def world_size(self) -> int:
        return self.launch.nproc_per_node * self.launch.nnodes

    def data_parallel(self, topology: Topology) -> int:
        """DP of ``topology``; refused when the batches cannot be split over it."""
        dp = topology.dp(self.world_size)
        if self.global_batch_size % (self.micro_batch_size * dp):
            raise ConfigError(
                "global_batch_size",
                f"{self.global_batch_size} must be divisible by micro_batch_size x DP = "
                f"{self.micro_batch_size} x {dp} for topology {topology.name}",
            )
        if self.num_layers % topology.pp:
            raise ConfigError(
                "num_layers",
                f"{self.num_layers} must be divisible by PP={topology.pp} "
                f"for topology {topology.name}",
            )
        if self.num_attention_heads % topology.tp:
            raise ConfigError(
                "num_attention_heads",
                f"{self.num_attention_heads} must be divisible by TP={topology.tp} "
                f"for topology {topology.name}",
            )
        return dp


@attrs.define(kw_only=True)
class TopologyCheckConfig:
    """``mtb megatron topology``: the world size and the topologies checked in it."""

    world_size: int = setting(8, help="CPU ranks spawned over gloo", minimum=1)
    topologies: list[Topology] = attrs.field(factory=list)
    output: str = _output()
    launch: LaunchConfig = attrs.field(factory=LaunchConfig)

    def __attrs_post_init__(self):
        for topology in self.topologies:
            topology.dp(self.world_size)
