"""The comm, tp and moe result documents (attrs classes, cattrs (un)structuring).

They share core's document frame (kind, schema_version, status, error,
config, plugins, provenance) and its statuses; units live in key names.
summaries.py builds them from every rank's raw records.
"""

import attrs
import cattrs


@attrs.define(kw_only=True)
class CommMeasurement:
    """One operation, placement and size; times are per iteration, in microseconds.

    ``time_us`` is each rank's mean over the iterations, then the max across
    ranks (``time_avg_us``: the mean across ranks); algbw and busbw use
    ``time_us``. min/p50/max are over iterations of the per-iteration max
    across ranks.
    """

    operation: str
    placement: str
    mode: str | None
    status: str
    reason: str | None = None
    dtype: str
    bytes: int
    elements: int
    time_us: float | None = None
    time_avg_us: float | None = None
    time_min_us: float | None = None
    time_p50_us: float | None = None
    time_max_us: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    per_rank_time_us: list[float] = attrs.field(factory=list)
    slowest_rank: int | None = None
    wrong_elements: int | None = None
    checked_elements: int | None = None
    #: all_to_all: elements rank src sends to rank dst, and max/mean received per rank
    splits: list[list[int]] | None = None
    imbalance: float | None = None


@attrs.define(kw_only=True)
class TensorCheck:
    """One compared tensor: max errors across ranks against the single-device reference.

    ``max_rel_error`` is the max absolute error over the max magnitude of the
    reference tensor (normwise, so elements near zero do not blow it up).
    """

    check: str
    dtype: str
    tensor: str
    max_abs_error: float
    max_rel_error: float
    tolerance: float
    ok: bool


@attrs.define(kw_only=True)
class MoeRanks:
    """MoE routing and expert-parallel numbers, summed or reduced across ranks."""

    tokens: int
    capacity_per_rank: int
    assigned_per_expert: list[int]
    kept_per_expert: list[int]
    dropped: int
    imbalance: float
    kept_imbalance: float
    load_balancing_loss: float
    dispatch_time_us: float
    combine_time_us: float
    max_abs_error: float
    wrong_elements: int
    checked_elements: int


@attrs.define(kw_only=True)
class Document:
    kind: str
    schema_version: int
    status: str
    error: str | None = None
    config: dict
    plugins: list[dict]
    provenance: dict
    environment: dict = attrs.field(factory=dict)


@attrs.define(kw_only=True)
class CommDocument(Document):
    #: ranks in each group that ran the collectives (``--group-size``; the bus factor's n);
    #: None in a document written before groups, or of a run that failed
    group_size: int | None = None
    measurements: list[CommMeasurement] = attrs.field(factory=list)


@attrs.define(kw_only=True)
class TpDocument(Document):
    tensors: list[TensorCheck] = attrs.field(factory=list)
    #: collectives issued per check and dtype: {"forward": {"all_reduce": 1}, ...}
    collectives: dict = attrs.field(factory=dict)
    expected_collectives: dict = attrs.field(factory=dict)


@attrs.define(kw_only=True)
class MoeDocument(Document):
    moe: MoeRanks | None = None


DOCUMENTS = {"comm": CommDocument, "tp": TpDocument, "moe": MoeDocument}
converter = cattrs.Converter()


def to_dict(document: Document) -> dict:
    return converter.unstructure(document)


def from_dict(data: dict) -> Document:
    return converter.structure(data, DOCUMENTS[data["kind"]])
