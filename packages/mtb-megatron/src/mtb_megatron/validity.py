"""Performance validity: when a Megatron number may be quoted as a performance result.

A topology's numbers are ``performance_valid`` only when every one of its
launches found its GPUs exclusive at start, the image is known (the project's
image names itself through MTB_IMAGE_*) or declared with ``--image``, it was
launched at least MIN_PERFORMANCE_REPEATS times, every launch succeeded, and
the metadata that makes it reproducible is complete. Otherwise it is false
with every reason, and its throughput is withheld.
"""

from mtb_megatron.config import MIN_PERFORMANCE_REPEATS

#: metadata a performance claim needs, as (what, how to read it from a launch record)
REQUIRED = (
    ("megatron commit", lambda r, ctx: ctx["megatron"]["commit"]),
    ("clean megatron checkout", lambda r, ctx: ctx["megatron"]["dirty"] is False or None),
    ("torch version", lambda r, ctx: ctx["versions"]["torch"]),
    ("CUDA version", lambda r, ctx: ctx["versions"]["cuda"]),
    ("GPU models", lambda r, ctx: ctx["versions"]["gpus"]),
    ("command", lambda r, ctx: r["command"]),
    ("stdout SHA256", lambda r, ctx: r["stdout"]["sha256"]),
    ("stderr SHA256", lambda r, ctx: r["stderr"]["sha256"]),
    ("GPU memory samples", lambda r, ctx: r["gpu_memory"]["status"] == "ok" or None),
)


def image_identity(declared: str, environment: dict) -> dict:
    """The image the run claims: its own MTB_IMAGE_* identity and/or the declared one."""
    running = environment.get("MTB_IMAGE_DIGEST") or environment.get("MTB_IMAGE_NAME")
    if (
        declared
        and running
        and declared
        not in (
            environment.get("MTB_IMAGE_DIGEST"),
            environment.get("MTB_IMAGE_NAME"),
            f"{environment.get('MTB_IMAGE_NAME')}@{environment.get('MTB_IMAGE_DIGEST')}",
        )
    ):
        problem = f"declared image {declared}, but running in {running}"
        return {"image": running, "source": "image", "problem": problem}
    if running:
        return {"image": running, "source": "image", "problem": None}
    if declared:
        return {"image": declared, "source": "declared", "problem": None}
    return {
        "image": None,
        "source": None,
        "problem": "image unknown: not the project's image (MTB_IMAGE_* unset) and no --image",
    }


def assess(records: list[dict], evidence: str, image: dict, context: dict) -> list[str]:
    """Every reason one topology's launches are not performance evidence (empty: valid)."""
    reasons = []
    if evidence != "performance":
        reasons.append("evidence is compatibility (use --evidence performance)")
    if len(records) < MIN_PERFORMANCE_REPEATS:
        reasons.append(f"{len(records)} repeat(s), performance needs {MIN_PERFORMANCE_REPEATS}")
    if image["problem"]:
        reasons.append(image["problem"])
    choice = context.get("transformer")
    if choice is not None and choice.fallback_reason:
        reasons.append(
            f"transformer_impl {choice.used}, the PyTorch fallback ({choice.fallback_reason}): "
            "compatibility evidence only"
        )
    for record in records:
        at = f"repeat {record['repeat']}"
        if record["status"] != "ok":
            reasons.append(f"{at}: status {record['status']}")
        exclusive = record["gpu_exclusive_at_start"]
        if exclusive["exclusive"] is None:
            reasons.append(f"GPU exclusivity not checked: {exclusive['reason']}")
        elif not exclusive["exclusive"]:
            pids = sorted({p["pid"] for p in exclusive["processes"]})
            reasons.append(f"{at}: GPUs were busy at start (pids {pids})")
        missing = [what for what, read in REQUIRED if not read(record, context)]
        if missing:
            reasons.append(f"metadata missing: {', '.join(missing)}")
    return list(dict.fromkeys(reasons))
