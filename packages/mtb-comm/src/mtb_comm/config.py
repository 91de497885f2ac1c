"""The settings of ``mtb comm``, ``mtb tp ...`` and ``mtb moe route`` (attrs, validated).

Each config carries core's LaunchConfig, so the launcher options, device and
backend mean exactly what they mean for ``mtb run``; the whole config is
stored in the result document.
"""

import attrs

from mtb.api import ConfigError, LaunchConfig, setting

OPERATIONS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
#: measured when asked for (nccl-tests keeps sendrecv apart from the collectives too)
EXTRA_OPERATIONS = ("send_recv",)
DTYPES = ("float32", "bfloat16", "float16")
ALL_TO_ALL_MODES = ("equal", "uneven", "both")
TP_CHECKS = ("check", "mlp", "sequence")
SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_list(field: str, text: str, choices: tuple[str, ...]) -> list[str]:
    """``a,b`` into a list of allowed names, in the given order, without repeats."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ConfigError(field, f"give at least one of: {', '.join(choices)}")
    for name in names:
        if name not in choices:
            raise ConfigError(field, f"{name!r} is not one of: {', '.join(choices)}")
    return list(dict.fromkeys(names))


def parse_size(text: str) -> int:
    """``16M`` into bytes (K, M, G are powers of 1024, as in nccl-tests)."""
    text = text.strip().upper().removesuffix("B")
    digits, unit = (text[:-1], text[-1]) if text[-1:] in SIZE_UNITS else (text, "")
    if not digits.isdigit() or int(digits) < 1:
        raise ConfigError(
            "sizes", f"{text!r} is not a size: bytes >= 1 with an optional K, M or G suffix"
        )
    return int(digits) * SIZE_UNITS[unit]


def parse_sizes(text: str) -> list[int]:
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise ConfigError("sizes", "give at least one size, e.g. 1K,1M,16M")
    return sizes


def _divides_the_world(instance, attribute, value):
    """A group size splits the ranks mtb starts into whole groups (under torchrun, whose
    ranks the flags do not give, the workers check it: ``group_of``)."""
    world = instance.launch.world_size
    if value and world > 1 and world % value:
        raise ConfigError(attribute.name, f"{value} must divide the world size {world}")


def group_of(config, world_size: int) -> int:
    """The ranks of each group, of ``world_size`` ranks running."""
    if config.group_size and world_size % config.group_size:
        raise ConfigError(
            "group_size", f"{config.group_size} must divide the world size {world_size}"
        )
    return config.group_size or world_size


def _divisible(instance, attribute, value):
    """A dimension that is sharded over the ranks must divide evenly."""
    world = instance.launch.world_size
    if value % world:
        raise ConfigError(attribute.name, f"{value} must be divisible by the world size {world}")


@attrs.define(kw_only=True)
class CommConfig:
    """``mtb comm``: which collectives, sizes and dtype, and how many iterations."""

    operations: list[str] = attrs.field(factory=lambda: list(OPERATIONS))  # or EXTRA_OPERATIONS
    sizes_bytes: list[int] = attrs.field(factory=lambda: [1024, 1024**2, 16 * 1024**2])
    dtype: str = setting("float32", help="element type", choices=DTYPES)
    warmup: int = setting(5, help="untimed iterations before each measurement", minimum=0)
    iters: int = setting(20, help="timed iterations per measurement", minimum=1)
    all_to_all_mode: str = setting(
        "both",
        help="all_to_all split sizes: equal, uneven (router-like) or both",
        choices=ALL_TO_ALL_MODES,
    )
    seed: int = setting(1234, help="seed of the uneven all_to_all router", minimum=0)
    group_size: int = setting(
        0,
        help="ranks in each group: the ranks split into groups of consecutive ranks that run "
        "every collective at once, as a layout's tensor- or data-parallel groups do (as "
        "nccl-tests' NCCL_TESTS_SPLIT splits them); 0: one group of every rank",
        minimum=0,
        maximum=4096,
        validator=_divides_the_world,
    )
    output: str = setting(
        "", help="result JSON path", shown_default="results/<kind>-<UTC time>.json"
    )
    launch: LaunchConfig = attrs.field(factory=LaunchConfig)


@attrs.define(kw_only=True)
class TpConfig:
    """``mtb tp check|mlp|sequence``: shapes, dtypes and the fault to inject."""

    check: str = setting("check", help="what is checked", choices=TP_CHECKS)
    dtypes: list[str] = attrs.field(factory=lambda: ["float32", "bfloat16"])
    seq_len: int = setting(16, help="sequence length", minimum=1, validator=_divisible)
    batch: int = setting(2, help="sequences per batch", minimum=1)
    hidden: int = setting(32, help="hidden size", minimum=1, validator=_divisible)
    ffn_hidden: int = setting(64, help="MLP inner size", minimum=1, validator=_divisible)
    seed: int = setting(1234, help="seed of weights, inputs and output gradients", minimum=0)
    inject_wrong_shard: bool = setting(False, help="give each rank its neighbour's weight shard")
    output: str = setting(
        "", help="result JSON path", shown_default="results/<kind>-<UTC time>.json"
    )
    launch: LaunchConfig = attrs.field(factory=LaunchConfig)


@attrs.define(kw_only=True)
class MoeConfig:
    """``mtb moe route``: tokens, experts, gating and the capacity rule."""

    tokens: int = setting(64, help="tokens per rank", minimum=1)
    hidden: int = setting(32, help="hidden size", minimum=1)
    experts: int = setting(4, help="experts in all", minimum=1, validator=_divisible)
    top_k: int = setting(1, help="experts per token (top-1 or top-2 gating)", minimum=1, below=3)
    capacity_factor: float = setting(1.25, help="capacity factor", minimum=0.0)
    dtype: str = setting("float32", help="element type", choices=("float32", "bfloat16"))
    warmup: int = setting(2, help="untimed dispatch/combine rounds", minimum=0)
    iters: int = setting(10, help="timed dispatch/combine rounds", minimum=1)
    seed: int = setting(1234, help="seed of router, experts and tokens", minimum=0)
    output: str = setting(
        "", help="result JSON path", shown_default="results/<kind>-<UTC time>.json"
    )
    launch: LaunchConfig = attrs.field(factory=LaunchConfig)

    def __attrs_post_init__(self):
        if self.top_k > self.experts:
            raise ConfigError("top_k", f"must be <= experts={self.experts}")
