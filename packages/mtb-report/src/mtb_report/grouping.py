"""Which results may share a table: same environment, then same comparable settings.

Different git revisions, torch versions, device models or images never share
a table (honesty rule); inside one environment, train results are grouped by
the settings that make their numbers comparable.
"""

import json

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


def settings_key(document: dict) -> str:
    """Model, precision, micro-batch, sequence, accumulation, warmup and steps, as text."""
    config = document.get("config", {})
    training = config.get("training", {})
    model = config.get("model", {})
    settings = {
        "model": model,
        "precision": training.get("precision"),
        "micro_batch_size": config.get("data", {}).get("micro_batch_size"),
        "seq_len": model.get("seq_len"),
        "grad_accum_steps": training.get("grad_accum_steps"),
        "warmup_steps": training.get("warmup_steps"),
        "steps": training.get("steps"),
    }
    return json.dumps(settings, sort_keys=True)


def describe_settings(document: dict) -> str:
    config = document.get("config", {})
    model, training = config.get("model", {}), config.get("training", {})
    micro_batch = config.get("data", {}).get("micro_batch_size")
    return (
        f"d_model {model.get('d_model')}, {model.get('n_layers')} layers, "
        f"{model.get('n_heads')} heads, vocab {model.get('vocab_size')}, "
        f"seq {model.get('seq_len')}, micro-batch {micro_batch}, "
        f"accumulation {training.get('grad_accum_steps')}, {training.get('precision')}, "
        f"{training.get('steps')} steps ({training.get('warmup_steps')} warmup)"
    )


def split(documents: list[dict], key) -> list[list[dict]]:
    """Documents partitioned by ``key(document)``, in order of first appearance."""
    groups: dict = {}
    for document in documents:
        groups.setdefault(key(document), []).append(document)
    return list(groups.values())
