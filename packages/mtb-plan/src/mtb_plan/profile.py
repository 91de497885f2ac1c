"""The device profile: every figure the step model needs, and how each was measured.

A profile is a TOML file. ``mtb plan calibrate`` writes one from measurements on
the machine at hand; a profile of hardware mtb cannot reach (an H200 node with
NVLink and InfiniBand) may be written by hand from datasheets or published
nccl-tests figures, with ``measured = false`` on each figure so that every plan
made from it says so. The model asks the profile for a figure; a missing one is
one line naming the calibrate command that measures it.
"""

import tomllib
from pathlib import Path

import attrs
import cattrs

from mtb.api import UsageError

#: nccl-tests' bus factor: busbw = algbw x factor(n); time = latency + bytes x factor / busbw
BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
    "broadcast": lambda n: 1.0,
}
COLLECTIVES = tuple(BUS_FACTORS)
SCOPES = ("node", "cluster")  # within one node; across nodes
#: what ``memory_bytes`` is the capacity of: one device (GPU), or the node, shared by its ranks
MEMORY_SCOPES = ("device", "node")


#: rates, bandwidths and capacities: a zero would divide by zero in the step model
_positive = attrs.validators.gt(0)


@attrs.frozen(kw_only=True)
class Compute:
    """What one rank achieves when ``ranks_per_node`` ranks share a node (CPU: its cores).

    ``matmul_flops_per_s`` and ``matmul_backward_flops_per_s``: achieved
    FLOP/s of the workload's GEMMs, forward and backward; ``elementwise_bytes_per_s``:
    bytes read and written per second by element-wise operators (norms,
    activations, softmax); ``op_overhead_s``: the fixed cost of one operator
    call (dispatch, kernel launch); ``optimizer_bytes_per_s``: optimizer-state
    bytes updated per second, counting 16 bytes per parameter (fp32 parameter,
    gradient and AdamW's two moments). ``attention_flops_per_s`` and
    ``attention_backward_flops_per_s``: causal scaled-dot-product attention,
    counting the causal half of Q·Kᵀ and P·V forward and twice that backward;
    None where not measured (the model then uses the matmul figures).
    ``solo_speedup``: how much faster one rank computes while the node's other
    ranks idle (CPU ranks share cores; 1 where each rank has its own device):
    a pipeline's fill and drain run at that speed. ``comm_overlap``: the share
    of gradient reduction that runs under backward (0: none, the default on
    CPU, whose collectives take the cores that compute; near 1 on a GPU,
    where a separate stream and the network carry it). ``peak_flops_per_s``:
    the datasheet peak MFU is computed against (None: the measured matmul
    throughput, as mtb's MFU on a CPU). ``training_efficiency``: how much
    longer the workload's arithmetic (FLOPs and bytes, not operator calls)
    takes inside a training step than timed alone (colder caches, allocation,
    the other work of the step): the full workload on plain data parallelism
    at the largest micro-batch calibrated that fits, its measured step less
    everything else the model predicts, over the predicted arithmetic.
    """

    ranks_per_node: int
    threads_per_rank: int | None = None
    matmul_flops_per_s: float = attrs.field(validator=_positive)
    matmul_backward_flops_per_s: float = attrs.field(validator=_positive)
    elementwise_bytes_per_s: float = attrs.field(validator=_positive)
    op_overhead_s: float
    optimizer_bytes_per_s: float = attrs.field(validator=_positive)
    solo_speedup: float = 1.0
    comm_overlap: float = 0.0
    training_efficiency: float = 1.0
    peak_flops_per_s: float | None = None
    attention_flops_per_s: float | None = None
    attention_backward_flops_per_s: float | None = None
    measured: bool = True
    how: str = ""


@attrs.frozen(kw_only=True)
class Curve:
    """One collective at one group size and scope: latency plus bytes over bus bandwidth."""

    collective: str = attrs.field(validator=attrs.validators.in_(COLLECTIVES))
    group_size: int
    scope: str = attrs.field(default="node", validator=attrs.validators.in_(SCOPES))
    #: ranks per node running when it was measured, ranks_per_node / group_size groups of
    #: them at once (a layout's groups share the node: on a CPU its cores); None: the group
    #: alone (profiles written by hand, or measured before groups ran at once)
    ranks_per_node: int | None = None
    latency_s: float
    bus_bandwidth_bytes_per_s: float = attrs.field(validator=_positive)
    measured: bool = True
    how: str = ""

    def time_s(self, nbytes: float) -> float:
        """Seconds for a buffer of ``nbytes`` (nccl-tests' size convention)."""
        if self.group_size == 1 or nbytes <= 0:
            return 0.0
        factor = BUS_FACTORS[self.collective](self.group_size)
        return self.latency_s + nbytes * factor / self.bus_bandwidth_bytes_per_s


#: the mechanisms whose fixed cost calibrate measures (mtb_plan.overheads)
MECHANISMS = ("base", "ac", "fsdp", "rep", "zero", "zero3", "tp", "sp", "pp", "cp", "ep")
#: the mechanisms calibrate measures on one rank; the others run over several, and a node of
#: one rank (one device, or one on each node of a cluster) pays what the fewest ranks per node paid
ONE_RANK_MECHANISMS = ("base", "ac")


@attrs.frozen(kw_only=True)
class Overhead:
    """The fixed cost a mechanism adds at ``ranks_per_node`` ranks: per micro-batch, and
    once a step.

    ``base``: what the workload's depth costs beyond its FLOPs, bytes and
    collectives (autograd and module calls each micro-batch; the optimizer's
    pass over the parameter tensors, the loss and the last reduction's wait
    once a step); the others: what a layout using the mechanism pays on top
    (``fsdp``: FSDP's gathers and hooks; ``rep``: FSDP's hooks and per-unit reductions
    over a shard group of one, replicated; tensor parallelism's DTensor redistributions,
    the optimizer over DTensors, ...). Measured on the workload's layers and
    heads at a negligible width, at one and at two micro-batches a step:
    ``per_step_s`` is what the second micro-batch does not add again.
    ``per_parameter_byte_s``: what the mechanism adds per byte of the rank's
    unsharded fp32 parameters, per micro-batch, beyond its collectives (FSDP's
    copies into and out of its gather and reduce buffers, and the gathers
    contending with compute for the cores): measured at the workload's width.
    """

    mechanism: str = attrs.field(validator=attrs.validators.in_(MECHANISMS))
    ranks_per_node: int
    per_micro_batch_s: float
    per_step_s: float = 0.0
    per_parameter_byte_s: float = 0.0
    measured: bool = True
    how: str = ""


@attrs.frozen(kw_only=True)
class Profile:
    """A machine's figures (one precision), with where they came from.

    ``memory_bytes`` is one device's memory (``memory_scope`` device, GPUs) or
    the node's (``node``, CPUs: its ranks share it); ``memory_per_rank`` gives
    a rank's share either way. ``runtime_bytes`` is what a rank holds before
    the model: the framework, its allocator and the process group (measured
    as RSS on CPU, used device memory on GPU). ``zero_runtime_bytes`` is the
    same for a rank of a DeepSpeed strategy (zero1-3), whose import and
    engine hold more (about 72 MiB more on CPU); None where DeepSpeed was not
    installed when the profile was measured.
    """

    name: str
    device: str
    device_name: str = ""
    precision: str
    devices_per_node: int
    memory_bytes: int = attrs.field(validator=_positive)
    memory_scope: str = attrs.field(default="device", validator=attrs.validators.in_(MEMORY_SCOPES))
    runtime_bytes: int = 0
    zero_runtime_bytes: int | None = None
    measured: bool = True
    how: str = ""
    created: str = ""
    compute: tuple[Compute, ...] = ()
    comm: tuple[Curve, ...] = ()
    overhead: tuple[Overhead, ...] = ()
    path: str = attrs.field(default="", eq=False)

    def memory_per_rank(self, ranks_per_node: int) -> int:
        """Bytes one rank may use: the device's, or its share of the node's."""
        if self.memory_scope == "node":
            return self.memory_bytes // ranks_per_node
        return self.memory_bytes

    def runtime_for(self, engine: str) -> int:
        """What a rank holds before its model under ``engine`` (``zero``: DeepSpeed's), or
        one line naming the fix."""
        if engine != "zero":
            return self.runtime_bytes
        if self.zero_runtime_bytes is None:
            counts = sorted({entry.ranks_per_node for entry in self.compute} or {1})
            raise UsageError(
                f"profile {self.name!r}: no zero_runtime_bytes (what a DeepSpeed rank holds "
                f"besides its model); measure it with DeepSpeed installed: "
                f"`{self.calibrate_hint(counts[0])}`"
            )
        return self.zero_runtime_bytes

    def compute_for(self, ranks_per_node: int) -> Compute:
        """The compute figures at ``ranks_per_node`` ranks per node, or one line naming the fix."""
        for entry in self.compute:
            if entry.ranks_per_node == ranks_per_node:
                return entry
        raise UsageError(
            f"profile {self.name!r}: no compute figures at {ranks_per_node} rank(s) per node; "
            f"measure them with `{self.calibrate_hint(ranks_per_node)}`"
        )

    def overhead_s(
        self,
        mechanisms: tuple[str, ...],
        ranks_per_node: int,
        parameter_bytes: float = 0.0,
        base: bool = True,
    ) -> float:
        """A micro-batch's cost for these mechanisms (and ``base``) beyond compute and
        collectives: each one's fixed cost and its cost per parameter byte (0 in a profile
        without overheads). It may be negative (an increment may be); the step model
        floors the step's sum of fixed costs at 0."""
        entries = self._overheads(mechanisms, ranks_per_node, base)
        fixed = sum(e.per_micro_batch_s for e in entries)
        return fixed + parameter_bytes * sum(e.per_parameter_byte_s for e in entries)

    def step_overhead_s(
        self, mechanisms: tuple[str, ...], ranks_per_node: int, base: bool = True
    ) -> float:
        """What these mechanisms (and ``base``) cost once a step, whatever its micro-batches."""
        return sum(e.per_step_s for e in self._overheads(mechanisms, ranks_per_node, base))

    def _overheads(self, mechanisms, ranks_per_node: int, base: bool) -> list[Overhead]:
        """The entries of these mechanisms (and ``base``) at ``ranks_per_node``; none in a
        profile without overheads; a missing one is a one-line error naming calibrate."""
        if not self.overhead or not (base or mechanisms):
            return []
        known = self._overheads_at(ranks_per_node)
        names = ("base", *mechanisms) if base else tuple(mechanisms)
        missing = [name for name in names if name not in known]
        if missing:
            several = missing[0] not in ONE_RANK_MECHANISMS
            raise UsageError(
                f"profile {self.name!r}: no {missing[0]} overhead at {ranks_per_node} rank(s) "
                f"per node; measure it with "
                f"`{self.calibrate_hint(max(2, ranks_per_node) if several else ranks_per_node)}`"
            )
        return [known[name] for name in names]

    def _overheads_at(self, ranks_per_node: int) -> dict[str, Overhead]:
        """Each mechanism's entry at ``ranks_per_node``; at one rank, one that runs over
        several ranks takes its entry at the fewest ranks per node it was measured at."""
        entries = sorted(self.overhead, key=lambda e: -e.ranks_per_node)
        several = [e for e in entries if e.mechanism not in ONE_RANK_MECHANISMS]
        fewest = {e.mechanism: e for e in several} if ranks_per_node == 1 else {}
        return fewest | {e.mechanism: e for e in entries if e.ranks_per_node == ranks_per_node}

    def curve(
        self, collective: str, group_size: int, scope: str, ranks_per_node: int | None = None
    ) -> Curve:
        """The curve of ``collective`` over ``group_size`` ranks in ``scope`` measured with
        ``ranks_per_node`` ranks running, else the group measured alone; or one line."""
        found = {
            entry.ranks_per_node: entry
            for entry in self.comm
            if (entry.collective, entry.group_size, entry.scope) == (collective, group_size, scope)
        }
        for running in (ranks_per_node, None, group_size):
            if running in found:
                return found[running]
        raise UsageError(
            f"profile {self.name!r}: no {collective} curve for {group_size} ranks "
            f"({'within a node' if scope == 'node' else 'across nodes'}); measure it with "
            f"`{self.calibrate_hint(group_size)}`"
        )

    def calibrate_hint(self, ranks_per_node: int) -> str:
        """The command that measures the profile again with ``ranks_per_node`` added (it
        rewrites the whole file, so it names every count the profile already has)."""
        counts = sorted({entry.ranks_per_node for entry in self.compute} | {ranks_per_node})
        return (
            f"mtb plan calibrate --device {self.device} --precision {self.precision} "
            f"--nproc-per-node {','.join(map(str, counts))} --output {self.path or 'PROFILE.toml'}"
        )

    def check_precision(self, precision: str) -> None:
        if precision != self.precision:
            raise UsageError(
                f"profile {self.name!r} was measured at {self.precision}, the workload trains in "
                f"{precision}; measure one with `mtb plan calibrate --precision {precision}`"
            )


_converter = cattrs.Converter(forbid_extra_keys=True)


def load(path: str | Path) -> Profile:
    """The profile at ``path``, or one line naming the file and what is wrong with it."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as error:
        raise UsageError(f"--profile: cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"--profile: {path} is not TOML: {error}") from None
    if not isinstance(data.get("profile", {}), dict):
        raise UsageError(f"--profile: {path}: [profile] must be a table of settings")
    document = {**data.get("profile", {}), **{name: data.get(name, []) for name in ENTRIES}}
    try:
        profile = _converter.structure(document, Profile)
    except (cattrs.BaseValidationError, ValueError, TypeError) as error:
        raise UsageError(f"--profile: {path}: {_first_error(error)}") from None
    return attrs.evolve(profile, path=str(path))


def _first_error(error: Exception) -> str:
    """cattrs' nested errors flattened to their first readable line."""
    messages = (
        cattrs.transform_error(error) if isinstance(error, cattrs.BaseValidationError) else []
    )
    if not messages:
        return str(error)
    if messages[0].startswith("invalid value"):  # a validator's refusal: say what it refused
        return f"{messages[0]}: {_leaf(error)}"
    return messages[0]


def _leaf(error: BaseException) -> BaseException:
    """The first exception inside cattrs' nested groups (a validator's own message)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def to_toml(profile: Profile) -> str:
    """The profile as TOML: a ``[profile]`` table, then ``[[compute]]``, ``[[comm]]`` and
    ``[[overhead]]`` entries."""
    import tomli_w

    data = _converter.unstructure(profile)
    data.pop("path")
    tables = {name: [_without_nulls(entry) for entry in data.pop(name)] for name in ENTRIES}
    return tomli_w.dumps({"profile": _without_nulls(data), **tables})


#: the profile's arrays of tables, in the file's order
ENTRIES = ("compute", "comm", "overhead")


def _without_nulls(table: dict) -> dict:
    """TOML has no null: a figure that does not apply (GPU threads) is left out."""
    return {key: value for key, value in table.items() if value is not None}
