"""``mtb checkpoint verify``: what needs no workers (one checkpoint's self-check, the
config that reloads a checkpoint, the document); mtb.checkpoint_compare loads two.
"""

from pathlib import Path

import attrs

from mtb import config as config_mod
from mtb.checkpoint import metadata as meta

COMPONENTS = ("model", "optimizer", "scheduler", "train_state", "rng")


def load_config(step_dir: Path, device: str, timeout_s: float):
    """The saving run's config, set to load ``step_dir`` at its saved world size."""
    document = meta.check_intact(step_dir)
    raw = document["config"]
    raw["launch"] = {
        **raw["launch"],
        "nproc_per_node": document["world_size"],
        "nnodes": 1,
        "node_rank": 0,
        "rdzv_endpoint": "",
        "max_restarts": 0,
        "device": device,
        "timeout_s": timeout_s,
    }
    fresh = attrs.asdict(config_mod.CheckpointConfig())
    raw["checkpoint"] = {**fresh, "resume": str(step_dir)}
    raw["output"] = None
    return config_mod.structure(raw)


def differing(left: dict, right: dict) -> list[str]:
    return [name for name in COMPONENTS if left.get(name) != right.get(name)]


def self_check(step_dir: Path) -> dict:
    """The verify document of one checkpoint: READY and its files match metadata.json."""
    try:
        document = meta.check_intact(step_dir)
    except meta.CheckpointError as error:
        return verify_document(str(error), verdict="", path=str(step_dir))
    files = len(document["files"])
    return verify_document(
        None,
        verdict=f"intact: READY, {files} file(s) match their SHA256 digests in metadata.json",
        path=str(step_dir),
        step=document["step"],
        files_checked=files,
    )


def verify_document(error: str | None, **fields) -> dict:
    from mtb.documents import document_provenance, result_document

    status = "failed" if error else "ok"
    return result_document(
        "checkpoint_verify",
        status=status,
        error=error,
        provenance=document_provenance([]),
        **fields,
    )
