"""Run configuration: attrs classes, validation and (un)structuring with cattrs.

Each field carries its help text and unit in metadata; the ``mtb run`` options
are generated from them, so a field, its CLI flag and its TOML key never drift
apart. Precedence: defaults < preset < TOML file < command-line flags.
"""

import hashlib
import json
import math
from typing import Any

import attrs
import cattrs

from mtb.errors import ConfigError
from mtb.presets import PRESETS

PRECISIONS = ("fp32", "bf16", "fp16")
OPTIMIZERS = ("adamw", "sgd")
SYNC_MODES = ("auto", "every", "last")
LR_SCHEDULES = ("constant", "cosine")
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl")
EVIDENCE = ("exploratory", "formal")

# Upper bounds of counts: far beyond any benchmark run, low enough that a typo
# (10**30 steps) is refused before launch instead of running without end.
MAX_STEPS = 10_000_000
MAX_RANKS_PER_NODE = 256
MAX_NODES = 4096
MAX_SEED = 2**63 - 1
MAX_TIMEOUT_S = 30 * 24 * 3600.0


def setting(
    default=attrs.NOTHING,
    *,
    help: str,
    unit: str = "",
    choices=(),
    minimum=None,
    below=None,
    maximum=None,
    flag: str = "",
    shown_default: str = "",
    metavar: str = "",
    validator=None,
    converter=None,
):
    """An attrs field with the metadata the CLI and docs are generated from.

    Every field refuses NaN and infinity; ``minimum``, ``below`` and
    ``maximum`` bound numbers (a count must have a ``maximum``).
    """
    validators = [_finite, *(v for v in (validator,) if v)]
    if choices:
        validators.append(_one_of(choices))
    if (minimum, below, maximum) != (None, None, None):
        validators.append(_in_range(minimum, below, maximum))
    metadata = {
        "help": help,
        "unit": unit,
        "choices": tuple(choices),
        "range": (minimum, below, maximum),
        "flag": flag,
        "shown_default": shown_default,
        "metavar": metavar,
    }
    return attrs.field(
        default=default, validator=validators, converter=converter, metadata=metadata
    )


def _path(instance, attribute) -> str:
    section = getattr(type(instance), "SECTION", "")
    return f"{section}.{attribute.name}" if section else attribute.name


def _size(instance, attribute, value):
    from mtb.memory import parse_size

    if value is None:
        return
    try:
        if parse_size(value) <= 0:
            raise ValueError(f"must be > 0, got {value!r}")
    except ValueError as error:
        raise ConfigError(_path(instance, attribute), str(error)) from None


def _one_of(choices):
    def check(instance, attribute, value):
        if value not in choices:
            allowed = ", ".join(choices)
            raise ConfigError(_path(instance, attribute), f"{value!r} is not one of: {allowed}")

    return check


def _finite(instance, attribute, value):
    """NaN and infinity pass every comparison test (nan < 0 is False): refuse them first."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(_path(instance, attribute), f"must be a finite number, got {value}")


def _in_range(minimum, below, maximum):
    def check(instance, attribute, value):
        if value is None:
            return
        if minimum is not None and value < minimum:
            raise ConfigError(_path(instance, attribute), f"must be >= {minimum}, got {value}")
        if below is not None and value >= below:
            raise ConfigError(_path(instance, attribute), f"must be < {below}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(_path(instance, attribute), f"must be <= {maximum}, got {value}")

    return check


@attrs.define(kw_only=True)
class ModelConfig:
    """Shape of the GPT-like decoder."""

    SECTION = "model"

    vocab_size: int = setting(help="vocabulary size", unit="tokens", minimum=2, maximum=2**24)
    d_model: int = setting(help="hidden size", unit="features", minimum=1, maximum=2**17)
    n_heads: int = setting(help="attention heads per layer", minimum=1, maximum=1024)
    n_layers: int = setting(help="transformer blocks", minimum=1, maximum=1024)
    seq_len: int = setting(help="sequence length", unit="tokens", minimum=1, maximum=2**20)
    mlp_ratio: int = setting(
        4, help="MLP hidden size as a multiple of d_model", minimum=1, maximum=64
    )
    dropout: float = setting(0.0, help="dropout probability", minimum=0.0, below=1.0)
    tie_embeddings: bool = setting(True, help="share input embedding and output head")
    moe_experts: int = setting(
        0, help="experts per MoE layer (0: dense MLP in every block)", minimum=0, maximum=4096
    )
    moe_top_k: int = setting(1, help="experts each token is routed to", minimum=1, maximum=4096)
    moe_capacity_factor: float = setting(
        1.25, help="expert capacity as a multiple of an even share of a sequence's assignments"
    )
    moe_dropless: bool = setting(False, help="no capacity limit: no token is dropped")
    moe_every: int = setting(
        1, help="every Nth block has an MoE layer (the last of each N)", minimum=1, maximum=1024
    )
    moe_aux_loss_coef: float = setting(
        0.01, help="weight of the load-balancing auxiliary loss", minimum=0.0
    )
    moe_z_loss_coef: float = setting(0.0, help="weight of the router z-loss", minimum=0.0)

    def __attrs_post_init__(self):
        if self.d_model % self.n_heads:
            raise ConfigError(
                "model.d_model",
                f"{self.d_model} must be divisible by model.n_heads={self.n_heads}",
            )
        if self.moe_experts:
            self._check_moe()

    def _check_moe(self) -> None:
        if self.moe_top_k > self.moe_experts:
            raise ConfigError(
                "model.moe_top_k",
                f"{self.moe_top_k} must be <= model.moe_experts={self.moe_experts}",
            )
        if self.moe_capacity_factor <= 0:
            raise ConfigError(
                "model.moe_capacity_factor",
                f"must be > 0, got {self.moe_capacity_factor} (for no limit use moe_dropless)",
            )
        if self.moe_every > self.n_layers:
            raise ConfigError(
                "model.moe_every",
                f"{self.moe_every} leaves no MoE layer in model.n_layers={self.n_layers} blocks",
            )

    def is_moe_block(self, index: int) -> bool:
        """Whether block ``index`` (from 0) has an MoE layer instead of its MLP."""
        return self.moe_experts > 0 and (index + 1) % self.moe_every == 0


@attrs.define(kw_only=True)
class DataConfig:
    """Token batches, synthetic or from a file: deterministic in (seed, step, global sample)."""

    SECTION = "data"

    source: str = setting(
        "synthetic",
        help="synthetic, or a token file: a nanoGPT .bin or a Megatron PREFIX (.bin + .idx)",
        flag="--data",
        metavar="synthetic|PATH",
    )
    dtype: str = setting(
        "uint16",
        help="token id type of a headerless nanoGPT .bin (a Megatron index says its own)",
        choices=("uint16", "int32", "uint32"),
        flag="--data-dtype",
    )

    seed: int = setting(
        1234, help="seed of model init and synthetic data", minimum=0, maximum=MAX_SEED
    )
    micro_batch_size: int = setting(
        2, help="sequences per rank per micro-step", unit="sequences", minimum=1, maximum=65536
    )


@attrs.define(kw_only=True)
class TrainingConfig:
    """The measured loop: warmup, measured steps, repeats, optimizer, precision."""

    SECTION = "training"

    steps: int = setting(
        10,
        help="optimizer steps of the run, warmup included (a resumed run continues to it)",
        unit="steps",
        minimum=1,
        maximum=MAX_STEPS,
    )
    warmup_steps: int = setting(
        2,
        help="first steps of each trial (and of a resumed run) excluded from metrics",
        unit="steps",
        minimum=0,
        maximum=MAX_STEPS,
    )
    repeat: int = setting(
        1, help="independent trials (fresh model, optimizer, data)", minimum=1, maximum=1000
    )
    grad_accum_steps: int = setting(
        1,
        help="micro-batches accumulated per optimizer step",
        unit="micro-batches",
        minimum=1,
        maximum=65536,
    )
    lr: float = setting(3e-4, help="learning rate", minimum=0.0)
    weight_decay: float = setting(0.0, help="weight decay", minimum=0.0)
    optimizer: str = setting("adamw", help="optimizer", choices=OPTIMIZERS)
    precision: str = setting("fp32", help="numeric precision of compute", choices=PRECISIONS)
    gradient_sync_mode: str = setting(
        "auto",
        help="gradient sync under accumulation: every micro-batch, the last only, "
        "or the strategy's default",
        choices=SYNC_MODES,
    )
    activation_checkpointing: bool = setting(
        False, help="recompute each transformer block's activations in backward"
    )
    compile: bool = setting(
        False,
        help="torch.compile each transformer block; compiling happens in the warmup steps "
        "and is reported apart (compile_s)",
    )
    lr_schedule: str = setting("constant", help="learning-rate schedule", choices=LR_SCHEDULES)
    lr_warmup_steps: int = setting(
        0,
        help="linear warmup steps of the cosine schedule",
        unit="steps",
        minimum=0,
        maximum=MAX_STEPS,
    )
    min_lr: float = setting(0.0, help="final learning rate of the cosine schedule", minimum=0.0)
    max_grad_norm: float | None = setting(
        None,
        help="clip the global gradient norm to this value",
        shown_default="no clipping",
        minimum=0.0,
    )
    inject_nan_at_step: int | None = setting(
        None,
        help="make the loss non-finite at this step (fault tests)",
        shown_default="never",
        minimum=0,
        maximum=MAX_STEPS,
    )
    inject_nan_rank: int = setting(
        0,
        help="rank that sees the injected non-finite loss",
        minimum=0,
        maximum=MAX_RANKS_PER_NODE * MAX_NODES - 1,
    )

    def __attrs_post_init__(self):
        if self.warmup_steps >= self.steps:
            raise ConfigError(
                "training.warmup_steps",
                f"must be < training.steps={self.steps} "
                "(steps counts every optimizer step, warmup included)",
            )
        if self.compile and self.warmup_steps < 1:
            raise ConfigError(
                "training.warmup_steps",
                "must be >= 1 with training.compile (compiling happens in the warmup steps)",
            )
        if self.min_lr > self.lr:
            raise ConfigError("training.min_lr", f"{self.min_lr} must be <= training.lr={self.lr}")


@attrs.define(kw_only=True)
class LaunchConfig:
    """Processes, rendezvous and devices; passed to torch's elastic launch API."""

    SECTION = "launch"

    nproc_per_node: int = setting(
        1, help="worker processes on this node", minimum=1, maximum=MAX_RANKS_PER_NODE
    )
    nnodes: int = setting(1, help="nodes taking part", minimum=1, maximum=MAX_NODES)
    node_rank: int = setting(0, help="rank of this node", minimum=0, maximum=MAX_NODES - 1)
    rdzv_endpoint: str = setting(
        "", help="rendezvous HOST:PORT", shown_default="a free local port (one node)"
    )
    rdzv_id: str = setting("mtb", help="rendezvous id shared by every node")
    local_addr: str = setting(
        "",
        help="this node's address as its peers reach it (needed when nodes share a hostname)",
        shown_default="a lookup of the hostname",
    )
    max_restarts: int = setting(
        0, help="worker group restarts after a failure", minimum=0, maximum=100
    )
    timeout_s: float = setting(
        1800.0,
        help="wall-clock limit of the launch",
        unit="s",
        minimum=1,
        maximum=MAX_TIMEOUT_S,
        flag="--timeout",
    )
    device: str = setting("auto", help="device type (auto: cuda if present)", choices=DEVICES)
    backend: str = setting(
        "auto", help="process-group backend (auto: nccl on cuda, gloo on cpu)", choices=BACKENDS
    )
    memory_limit_per_rank: str | None = setting(
        None,
        help="cap each worker's memory (RLIMIT_DATA), e.g. 2GiB; past it allocations fail "
        "and the run ends with status oom",
        shown_default="no cap",
        validator=_size,
    )

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def __attrs_post_init__(self):
        if self.node_rank >= self.nnodes:
            raise ConfigError("launch.node_rank", f"must be < launch.nnodes={self.nnodes}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ConfigError("launch.rdzv_endpoint", "HOST:PORT is required when nnodes > 1")
        host, _, port = self.rdzv_endpoint.rpartition(":")
        if self.rdzv_endpoint and not (host and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(
                "launch.rdzv_endpoint", f"{self.rdzv_endpoint!r} is not HOST:PORT (port 1-65535)"
            )


PP_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")


@attrs.define(kw_only=True)
class ParallelConfig:
    """The parallel layout: how the world's ranks split into mesh dimensions.

    The product dp_replicate x dp_shard x cp x tp x pp must equal the world size;
    ``dp_shard = -1`` takes whatever is left. ``ep`` is not a factor of its own:
    expert-parallel groups are carved out of the data-parallel ranks. Checked
    against the world size and the model by :func:`mtb.layout.Layout.of` before launch.
    """

    SECTION = "parallel"

    dp_replicate: int = setting(
        1, help="data-parallel replicas (HSDP's replicate dimension)", minimum=1, maximum=65536
    )
    dp_shard: int = setting(
        -1,
        help="data-parallel shards (FSDP's shard dimension); -1: the world size "
        "divided by the other dimensions",
        minimum=-1,
        maximum=65536,
        shown_default="-1 (what is left)",
    )
    cp: int = setting(
        1,
        help="context-parallel degree: each sequence split over cp ranks (ring attention)",
        minimum=1,
        maximum=1024,
    )
    tp: int = setting(1, help="tensor-parallel degree", minimum=1, maximum=1024)
    pp: int = setting(1, help="pipeline-parallel stages (ranks)", minimum=1, maximum=1024)
    ep: int = setting(
        1,
        help="expert-parallel degree (mixture-of-experts models; divides the data-parallel size)",
        minimum=1,
        maximum=65536,
    )
    sequence_parallel: bool = setting(
        False, help="shard norms and dropout over the sequence across the tensor-parallel ranks"
    )
    pp_schedule: str = setting("1f1b", help="pipeline schedule", choices=PP_SCHEDULES)
    pp_microbatches: int | None = setting(
        None,
        help="micro-batches each step's batch is split into for the pipeline schedule",
        minimum=1,
        maximum=65536,
        shown_default="the number of pipeline stages",
    )
    pp_stages_per_rank: int = setting(
        1,
        help="pipeline stages each rank holds (more than 1: interleaved-1f1b)",
        minimum=1,
        maximum=64,
    )

    def __attrs_post_init__(self):
        if self.dp_shard == 0:
            raise ConfigError("parallel.dp_shard", "must be >= 1, or -1 for what is left; got 0")


@attrs.define(kw_only=True)
class CheckpointConfig:
    """Where and how often to save, how many to keep, and what to resume from."""

    SECTION = "checkpoint"

    dir: str | None = setting(
        None, help="checkpoint directory", flag="--checkpoint-dir", shown_default="no checkpoints"
    )
    save_every: int | None = setting(
        None,
        help="save after every N optimizer steps",
        unit="steps",
        minimum=1,
        maximum=MAX_STEPS,
        shown_default="never (resume only)",
    )
    keep_last: int = setting(
        3, help="READY checkpoints kept (0 keeps all)", minimum=0, maximum=100_000
    )
    resume: str | None = setting(
        None,
        help="resume from 'latest', a step number or a checkpoint path",
        shown_default="start from step 0",
    )
    async_save: bool = setting(False, help="write checkpoints in the background while training")
    backend: str = setting(
        "auto",
        help="checkpoint backend (see `mtb plugins`)",
        flag="--checkpoint-backend",
        shown_default="auto (the strategy's own)",
    )
    inject_kill_at_step: int | None = setting(
        None,
        help="SIGKILL a rank after this many steps (fault tests; first launch only)",
        shown_default="never",
        minimum=0,
        maximum=MAX_STEPS,
    )
    inject_kill_during_save: bool = setting(
        False, help="with --inject-kill-at-step S: kill while checkpoint step S is written"
    )
    inject_kill_rank: int = setting(
        1,
        help="rank that --inject-kill-at-step kills",
        minimum=0,
        maximum=MAX_RANKS_PER_NODE * MAX_NODES - 1,
    )
    save_on_signal: bool = setting(
        False,
        help="on SIGUSR1 (a batch system's warning, e.g. sbatch --signal=USR1@60) every rank "
        "saves the completed step and the run stops with exit 138",
    )
    record_digests: bool = setting(
        False,
        help="record SHA256 digests of model, optimizer, scheduler, train state and RNG "
        "after loading and at the end (gathers the full model on every rank)",
    )

    @property
    def enabled(self) -> bool:
        """True when the run saves or resumes checkpoints."""
        return self.dir is not None or self.resume is not None

    @property
    def resume_needs_dir(self) -> bool:
        """'latest' and a step number name checkpoints inside checkpoint.dir."""
        return self.resume is not None and (self.resume == "latest" or self.resume.isdigit())


@attrs.define(kw_only=True)
class ProfileConfig:
    """Which profiler wraps the run, its schedule, and where traces go."""

    SECTION = "profile"

    profiler: str | None = setting(
        None, help="profiler wrapping the run (see `mtb plugins`)", shown_default="off"
    )
    wait_steps: int = setting(
        0,
        help="measured steps the profiler skips before its warmup",
        unit="steps",
        minimum=0,
        maximum=MAX_STEPS,
        flag="--profile-wait",
    )
    warmup_steps: int = setting(
        1,
        help="steps the profiler runs but discards, after its wait",
        unit="steps",
        minimum=0,
        maximum=MAX_STEPS,
        flag="--profile-warmup",
    )
    active_steps: int = setting(
        3,
        help="steps the profiler records",
        unit="steps",
        minimum=1,
        maximum=MAX_STEPS,
        flag="--profile-active",
    )
    dir: str | None = setting(
        None,
        help="directory of the traces and profile summaries",
        flag="--profile-dir",
        shown_default="the result path without .json, plus -profile",
    )
    top: int = setting(
        15,
        help="operators listed per table of the summary",
        minimum=1,
        maximum=1000,
        flag="--profile-top",
    )
    baseline: bool = setting(
        True,
        help="also run the same steps unprofiled first, to measure the profiler's overhead",
        flag="--profile-baseline",
    )

    @property
    def enabled(self) -> bool:
        return self.profiler is not None

    @property
    def window(self) -> range:
        """Indices, among the measured steps, of the steps the profiler records."""
        first = self.wait_steps + self.warmup_steps
        return range(first, first + self.active_steps)


def _comma_separated(values) -> tuple[str, ...]:
    """``("a,b", "c")`` as ``("a", "b", "c")``: a flag given once with commas, or repeated."""
    names = (name.strip() for value in values for name in value.split(","))
    return tuple(dict.fromkeys(name for name in names if name))


@attrs.define(kw_only=True)
class LoggingConfig:
    """Where step metrics go besides the result: metric loggers such as TensorBoard."""

    SECTION = "logging"

    to: tuple[str, ...] = setting(
        (),
        help="send step metrics, config and provenance to these metric loggers "
        "(comma-separated or repeated; see `mtb plugins`)",
        flag="--log-to",
        metavar="NAME[,NAME...]",
        shown_default="none",
        converter=_comma_separated,
    )
    dir: str | None = setting(
        None,
        help="directory of the loggers' files, one folder per logger",
        flag="--log-dir",
        shown_default="the result path without .json, plus -logs",
    )


@attrs.define(kw_only=True)
class RunConfig:
    """Everything one ``mtb run`` needs; stored whole in its result."""

    strategy: str = setting("single", help="training strategy (see `mtb plugins`)")
    preset: str = setting("small", help="model preset", choices=tuple(PRESETS))
    output: str | None = setting(
        None, help="result JSON path", shown_default="results/run-<UTC time>-<strategy>.json"
    )
    overwrite: bool = setting(
        False, help="replace an existing result file at --output instead of refusing the run"
    )
    reports: tuple[str, ...] = setting(
        (),
        help="also render the result with reporter FORMAT (see `mtb plugins`) at PATH, "
        "after the JSON result is written; repeatable",
        flag="--report",
        metavar="FORMAT[:PATH]",
        shown_default="none; PATH: --output with the reporter's suffix",
    )
    peak_tflops: float | None = setting(
        None,
        help="peak of one device for MFU",
        unit="TFLOP/s",
        minimum=0.0,
        shown_default="GPU table, else measured CPU matmul",
    )
    evidence: str = setting(
        "exploratory",
        help="formal: refuse a dirty git tree, a missing revision, an image built from "
        "another revision or one based outside the official registries",
        choices=EVIDENCE,
    )
    allow_registry: str | None = setting(
        None,
        help="also trust an image base from this registry (or registry/repository; "
        "comma-separated) besides the pinned official ones",
        shown_default="none",
    )
    model: ModelConfig = attrs.field(metadata={"section": True})
    data: DataConfig = attrs.field(factory=DataConfig, metadata={"section": True})
    training: TrainingConfig = attrs.field(factory=TrainingConfig, metadata={"section": True})
    launch: LaunchConfig = attrs.field(factory=LaunchConfig, metadata={"section": True})
    checkpoint: CheckpointConfig = attrs.field(factory=CheckpointConfig, metadata={"section": True})
    parallel: ParallelConfig = attrs.field(factory=ParallelConfig, metadata={"section": True})
    profile: ProfileConfig = attrs.field(factory=ProfileConfig, metadata={"section": True})
    logging: LoggingConfig = attrs.field(factory=LoggingConfig, metadata={"section": True})
    strategy_options: dict[str, Any] = attrs.field(factory=dict, metadata={"section": True})
    checkpoint_backend_options: dict[str, Any] = attrs.field(
        factory=dict, metadata={"section": True}
    )
    profiler_options: dict[str, Any] = attrs.field(factory=dict, metadata={"section": True})
    reporter_options: dict[str, Any] = attrs.field(factory=dict, metadata={"section": True})

    def __attrs_post_init__(self):
        if self.peak_tflops is not None and self.peak_tflops <= 0:
            raise ConfigError("peak_tflops", f"must be > 0, got {self.peak_tflops}")
        if self.training.inject_nan_rank >= self.launch.world_size:
            raise ConfigError(
                "training.inject_nan_rank",
                f"must be < the world size {self.launch.world_size}",
            )
        self._check_checkpoint()
        self._check_profile()

    def _check_profile(self) -> None:
        profile, training = self.profile, self.training
        if not profile.enabled:
            return
        measured = training.steps - training.warmup_steps
        if profile.window.stop > measured:
            raise ConfigError(
                "profile.active_steps",
                f"profile.wait_steps + warmup_steps + active_steps = {profile.window.stop} "
                f"must be <= the measured steps {measured} (training.steps - warmup_steps)",
            )
        if training.repeat != 1:
            raise ConfigError("training.repeat", "must be 1 when profiling (--profiler)")
        if self.checkpoint.enabled:
            raise ConfigError("profile.profiler", "profiling does not combine with checkpointing")

    def _check_checkpoint(self) -> None:
        ckpt = self.checkpoint
        if ckpt.dir is None and (ckpt.save_every is not None or ckpt.resume_needs_dir):
            field = "save_every" if ckpt.save_every is not None else "resume"
            raise ConfigError(f"checkpoint.{field}", "needs checkpoint.dir (--checkpoint-dir)")
        if ckpt.save_on_signal and ckpt.dir is None:
            raise ConfigError(
                "checkpoint.save_on_signal", "needs checkpoint.dir (--checkpoint-dir)"
            )
        if ckpt.enabled and self.training.repeat != 1:
            raise ConfigError(
                "training.repeat",
                f"{self.training.repeat} must be 1 when checkpointing or resuming "
                "(trials and resumable runs are different experiments)",
            )
        if ckpt.inject_kill_at_step is not None and ckpt.inject_kill_rank >= self.launch.world_size:
            raise ConfigError(
                "checkpoint.inject_kill_rank", f"must be < the world size {self.launch.world_size}"
            )


SECTIONS = {
    "model": ModelConfig,
    "data": DataConfig,
    "training": TrainingConfig,
    "launch": LaunchConfig,
    "checkpoint": CheckpointConfig,
    "parallel": ParallelConfig,
    "profile": ProfileConfig,
    "logging": LoggingConfig,
}

#: the tables of options that plugins declare, one per kind (see mtb.options)
OPTION_SECTIONS = (
    "strategy_options",
    "checkpoint_backend_options",
    "profiler_options",
    "reporter_options",
)

# The fields that define the workload: a result or checkpoint is comparable
# with another only when these agree.
FINGERPRINT_FIELDS = (
    "strategy",
    "strategy_options",
    "model",
    "data",
    "training.grad_accum_steps",
    "training.gradient_sync_mode",
    "training.activation_checkpointing",
    "training.lr_schedule",
    "training.lr_warmup_steps",
    "training.min_lr",
    "training.max_grad_norm",
    "training.optimizer",
    "training.precision",
    "training.lr",
    "training.weight_decay",
)


def _structure_int(value, _type):
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _structure_float(value, _type):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {value!r}")
    return float(value)


def _structure_bool(value, _type):
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _structure_str(value, _type):
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _structure_names(value, _type):
    """A list of strings; a bare string would otherwise become a tuple of its characters."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return tuple(_structure_str(item, str) for item in value)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook_func(lambda kind: kind == tuple[str, ...], _structure_names)
    conv.register_structure_hook(int, _structure_int)
    conv.register_structure_hook(float, _structure_float)
    conv.register_structure_hook(bool, _structure_bool)
    conv.register_structure_hook(str, _structure_str)
    return conv


converter = _make_converter()


def _check_keys(raw: dict, cls, where: str) -> None:
    allowed = [f.name for f in attrs.fields(cls)]
    for key in raw:
        if key not in allowed:
            name = f"{where}.{key}" if where else key
            raise ConfigError(name, f"unknown key; allowed: {', '.join(allowed)}")


def _leaf_error(error: BaseException, path: str) -> ConfigError:
    """The first leaf of a cattrs validation error, as a ConfigError naming the field."""
    if isinstance(error, ConfigError):
        return error
    if isinstance(error, BaseExceptionGroup):
        sub = error.exceptions[0]
        notes = [n for n in getattr(sub, "__notes__", []) if hasattr(n, "name")]
        name = str(notes[0].name) if notes else ""
        return _leaf_error(sub, f"{path}.{name}" if path and name else path or name)
    return ConfigError(path or "config", str(error))


def structure_into(cls, raw: dict, where: str = ""):
    """``raw`` as a validated ``cls``: an unknown key or a bad value is one ConfigError."""
    _check_keys(raw, cls, where)
    try:
        return converter.structure(raw, cls)
    except ConfigError:
        raise
    except Exception as error:  # cattrs wraps field errors in exception groups
        raise _leaf_error(error, where) from None


def structure(raw: dict) -> RunConfig:
    """Build a validated RunConfig from a complete dict, or raise one ConfigError."""
    _check_keys(raw, RunConfig, "")
    for section, cls in SECTIONS.items():
        value = raw.get(section, {})
        if not isinstance(value, dict):
            raise ConfigError(section, "must be a table of settings")
        _check_keys(value, cls, section)
    for table in OPTION_SECTIONS:
        if not isinstance(raw.get(table, {}), dict):
            raise ConfigError(table, "must be a table of settings")
    try:
        return converter.structure(raw, RunConfig)
    except ConfigError:
        raise
    except Exception as error:  # cattrs wraps field errors in exception groups
        raise _leaf_error(error, "") from None


def resolve(file_values: dict | None = None, flags: dict | None = None) -> RunConfig:
    """Merge preset, TOML values and flags (later wins) into a RunConfig.

    ``flags`` has the same shape as the TOML file: top-level keys and one dict
    per section; None values mean "not given".
    """
    file_values = dict(file_values or {})
    flags = _drop_none(flags or {})
    _check_keys(file_values, RunConfig, "")
    preset = flags.get("preset", file_values.get("preset", "small"))
    if preset not in PRESETS:
        raise ConfigError("preset", f"{preset!r} is not one of: {', '.join(PRESETS)}")
    merged: dict[str, Any] = {
        **file_values,
        **{k: v for k, v in flags.items() if k not in SECTIONS},
    }
    merged["preset"] = preset
    for section in SECTIONS:
        base = dict(PRESETS[preset]) if section == "model" else {}
        from_file = file_values.get(section, {})
        if not isinstance(from_file, dict):
            raise ConfigError(section, "must be a table of settings")
        merged[section] = {**base, **from_file, **flags.get(section, {})}
    for table in OPTION_SECTIONS:
        options = file_values.get(table, {})
        if isinstance(options, dict):
            options = {**options, **flags.get(table, {})}
        merged[table] = options
    return structure(merged)


def _drop_none(flags: dict) -> dict:
    out = {}
    for key, value in flags.items():
        if isinstance(value, dict):
            out[key] = {k: v for k, v in value.items() if v is not None}
        elif value is not None:
            out[key] = value
    return out


def load_toml(path: str) -> dict:
    """Read a TOML run file; a syntax error or another encoding is a one-line ConfigError."""
    import tomllib

    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError("--config", f"cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("--config", f"{path} is not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            "--config", f"{path} is not UTF-8 text{_bom_of(error.object)}; save it as UTF-8"
        ) from None


def _bom_of(data: bytes) -> str:
    """Which byte-order mark starts ``data`` (a file saved as UTF-16 or UTF-32), if any."""
    import codecs

    marks = {
        "UTF-32": (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE),
        "UTF-16": (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE),
    }
    for name, boms in marks.items():
        if data.startswith(boms):
            return f" (it starts with a {name} byte-order mark)"
    return ""


def to_dict(config: RunConfig) -> dict:
    return converter.unstructure(config)


def to_toml(config: RunConfig) -> str:
    import tomli_w

    return tomli_w.dumps(_drop_nulls(to_dict(config)))


def _drop_nulls(value):
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def select(doc: object, dotted: str):
    """The value at a dotted path such as ``training.precision`` (None when absent)."""
    for part in dotted.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(part)
    return doc


def fingerprint_fields(config: RunConfig) -> dict:
    """The values of FINGERPRINT_FIELDS, by dotted name.

    A dense model leaves the ``moe_*`` fields out, so its fingerprint is the
    one it had before models had them (older checkpoints still resume).
    """
    doc = to_dict(config)
    if not config.model.moe_experts:
        doc["model"] = {k: v for k, v in doc["model"].items() if not k.startswith("moe_")}
    return {name: select(doc, name) for name in FINGERPRINT_FIELDS}


def fingerprint(config: RunConfig) -> str:
    """SHA256 over the workload-defining fields (FINGERPRINT_FIELDS)."""
    covered = fingerprint_fields(config)
    canonical = json.dumps(covered, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
