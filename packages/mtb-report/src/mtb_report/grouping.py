"""Which results may share a table: same environment, then the same work.

Different git revisions, torch versions, device models or images never share
a table (honesty rule); inside one environment, train results share a table
only when every config field that changes the work agrees. Inside a table, a
row is one variant (strategy, its options, the gradient-sync mode, the layout's
model dimensions) at one world size. The parallel layout is not work: runs of
one global batch under different layouts also meet in a layout table.
"""

import json

from mtb_report.records import global_batch, model_dims

#: environment fields whose difference splits results into separate sections
ENVIRONMENT_FIELDS = ("git revision", "torch", "device model", "image")


def device_model(provenance: dict) -> str | None:
    gpus = provenance.get("gpus") or []
    if gpus:
        return ", ".join(sorted(set(gpus)))
    return (provenance.get("cpu") or {}).get("model")


def image(provenance: dict) -> str | None:
    values = provenance.get("image") or {}
    for name in ("MTB_IMAGE_DIGEST", "MTB_IMAGE_NAME", "MTB_IMAGE_REVISION"):
        if values.get(name):
            return values[name]
    return None


def environment_key(document: dict) -> tuple:
    """(git revision, torch, device model, image); None where the document does not say."""
    provenance = document.get("provenance") or {}
    return (
        (provenance.get("git") or {}).get("revision"),
        provenance.get("torch"),
        device_model(provenance),
        image(provenance),
    )


def describe_environment(key: tuple) -> str:
    return ", ".join(
        f"{name} {value if value is not None else 'unknown'}"
        for name, value in zip(ENVIRONMENT_FIELDS, key, strict=True)
    )


def differences(keys: list[tuple]) -> list[str]:
    """The environment fields on which the keys disagree."""
    return [
        name
        for index, name in enumerate(ENVIRONMENT_FIELDS)
        if len({key[index] for key in keys}) > 1
    ]


#: config fields that change neither the work nor how it is measured, or that tell
#: the rows of one table apart (strategy, its options, the gradient-sync mode)
NOT_WORK = frozenset(
    (
        "strategy", "strategy_options", "training.gradient_sync_mode", "preset", "output",
        "parallel",
        "overwrite", "reports", "reporter_options", "profiler_options",
        "peak_tflops", "evidence", "data.seed", "training.repeat", "training.inject_nan_at_step",
        "training.inject_nan_rank", "launch.nproc_per_node", "launch.nnodes", "launch.node_rank",
        "launch.rdzv_endpoint", "launch.rdzv_id", "launch.local_addr", "launch.max_restarts",
        "launch.timeout_s", "checkpoint.dir", "checkpoint.resume", "checkpoint.keep_last",
        "checkpoint.record_digests", "checkpoint.inject_kill_at_step",
        "checkpoint.inject_kill_during_save", "checkpoint.inject_kill_rank", "profile",
    )
)  # fmt: skip


def work_fields(config: dict, prefix: str = "") -> dict:
    """Every config field that changes the work, by dotted name (new fields count by default)."""
    fields = {}
    for name, value in config.items():
        dotted = prefix + name
        if dotted in NOT_WORK:
            continue
        if isinstance(value, dict):
            fields.update(work_fields(value, dotted + "."))
        else:
            fields[dotted] = value
    return fields


def settings_key(document: dict) -> str:
    """The work a train result measured (model, data, training, device, checkpointing), as text."""
    return json.dumps(work_fields(document.get("config", {})), sort_keys=True)


def settings_differences(documents: list[dict]) -> list[str]:
    """The work fields on which the documents disagree, by dotted name."""
    fields = [work_fields(d.get("config", {})) for d in documents]
    names = sorted({name for f in fields for name in f})
    return [n for n in names if len({json.dumps(f.get(n)) for f in fields}) > 1]


#: the fields describe_settings always names
DESCRIBED = frozenset(
    (
        "model.d_model", "model.n_layers", "model.n_heads", "model.vocab_size", "model.seq_len",
        "data.micro_batch_size", "training.grad_accum_steps", "training.precision",
        "training.steps", "training.warmup_steps",
    )
)  # fmt: skip


def describe_settings(document: dict, differing: list[str] = ()) -> str:
    """The headline settings, then the value of each field in ``differing`` (other tables'
    settings differ in them)."""
    config = document.get("config", {})
    model, training = config.get("model", {}), config.get("training", {})
    micro_batch = config.get("data", {}).get("micro_batch_size")
    return (
        f"d_model {model.get('d_model')}, {model.get('n_layers')} layers, "
        f"{model.get('n_heads')} heads, vocab {model.get('vocab_size')}, "
        f"seq {model.get('seq_len')}, micro-batch {micro_batch}, "
        f"accumulation {training.get('grad_accum_steps')}, {training.get('precision')}, "
        f"{training.get('steps')} steps ({training.get('warmup_steps')} warmup)"
    ) + "".join(
        f", {name} {work_fields(config).get(name)}" for name in differing if name not in DESCRIBED
    )


def split(documents: list[dict], key) -> list[list[dict]]:
    """Documents partitioned by ``key(document)``, in order of first appearance."""
    groups: dict = {}
    for document in documents:
        groups.setdefault(key(document), []).append(document)
    return list(groups.values())


def variant_key(record: dict) -> str:
    """What tells runs of one table apart, world size aside: strategy, options, sync mode,
    and the layout's dimensions beyond data parallelism (tp2 at any dp scales alike)."""
    fields = ("strategy", "strategy_options", "gradient_sync_requested", "gradient_sync_mode")
    dims = model_dims(record.get("layout") or "")
    return json.dumps([*(record[f] for f in fields), dims], sort_keys=True)


#: work fields a layout comparison lets differ: how a global batch is split
BATCH_SPLIT = ("data.micro_batch_size", "training.grad_accum_steps")


def layout_key(document: dict) -> str:
    """Runs of the same work and global batch, however the layout splits it."""
    fields = work_fields(document.get("config", {}))
    work = {k: v for k, v in fields.items() if k not in BATCH_SPLIT}
    return json.dumps([work, global_batch(document)], sort_keys=True)
