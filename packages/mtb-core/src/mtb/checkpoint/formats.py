"""Checkpoint format versions: what each one holds, and the upgrade of older ones.

Version 1 did not say what a checkpoint contains; version 2 lists it in
``contents`` (payload backend, train state, the ranks whose RNG states were
saved); version 3 writes the SHA256 of metadata.json into READY, so an
edited metadata.json is detected (``contents.metadata_digest``); version 4
holds the fused attention ``qkv`` weight with each head's q, k, v rows
together (``contents.qkv_order``), where earlier models held all q rows,
then all k, then all v. Reading an older checkpoint goes through
:func:`upgrade`, one version at a time, in memory: the files on disk are
never rewritten. What an upgraded checkpoint lacks (RNG states, for
example) is listed. Its weights load without error into this model but
would mean something else, so :func:`resume_refusal` refuses its resume;
``mtb checkpoint`` still reads it. A newer format than this mtb knows is
refused.
"""

from pathlib import Path

from mtb.checkpoint.layout import RNG_DIR, TRAIN_STATE

FORMAT_VERSION = 4
OLDEST = 1
#: how the model's fused ``qkv`` rows are ordered: per head (q, k, v of head 0, then head 1...)
QKV_ORDER = "per_head"
#: the mtb release line that wrote (and can resume) checkpoints with q, k, v in blocks
BLOCKS_RELEASE = "0.2.x"


def contents(files: dict, world_size: int, backend: str) -> dict:
    """What a checkpoint holds, from the names of its files."""
    rng = sorted(
        int(Path(name).stem.removeprefix("rank_"))
        for name in files
        if Path(name).parent.name == RNG_DIR
    )
    return {
        "payload": backend,
        "train_state": TRAIN_STATE in files,
        "rng_ranks": rng,
        "world_size": world_size,
        "metadata_digest": True,
        "qkv_order": QKV_ORDER,
    }


def lacking(document: dict) -> list[str]:
    """What a resume from this checkpoint cannot restore (empty: everything)."""
    held = document["contents"]
    missing = sorted(set(range(document["world_size"])) - set(held["rng_ranks"]))
    lacks = []
    if missing:
        lacks.append(f"RNG state of rank(s) {', '.join(map(str, missing))}")
    if not held["train_state"]:
        lacks.append("train state")
    if not held["metadata_digest"]:
        lacks.append("a digest of metadata.json")
    return lacks


def _from_1(document: dict) -> dict:
    """1 -> 2: derive ``contents`` from the files metadata.json lists."""
    held = contents(document.get("files", {}), document["world_size"], document["backend"])
    return {**document, "format_version": 2, "contents": held}


def _from_2(document: dict) -> dict:
    """2 -> 3: READY was empty, so nothing vouches for metadata.json itself."""
    held = {**document["contents"], "metadata_digest": False}
    return {**document, "format_version": 3, "contents": held}


def _from_3(document: dict) -> dict:
    """3 -> 4: the model of that release held the attention q, k, v rows in blocks."""
    held = {**document["contents"], "qkv_order": "blocks"}
    return {**document, "format_version": 4, "contents": held}


UPGRADES = {1: _from_1, 2: _from_2, 3: _from_3}


def resume_refusal(document: dict) -> str | None:
    """Why this mtb must not resume a checkpoint it reads (None: it may)."""
    if document["contents"]["qkv_order"] == QKV_ORDER:
        return None
    found = document.get("upgraded_from") or document["format_version"]
    return (
        f"checkpoint format {found} holds its attention weights in the older q/k/v order "
        f"(all q rows, then k, then v), which this mtb's model (format {FORMAT_VERSION}: "
        f"q, k, v per head) would silently misread; resume it with the mtb release that "
        f"wrote it ({BLOCKS_RELEASE})"
    )


def problem(version) -> str | None:
    """Why a checkpoint of ``version`` cannot be read by this mtb, or None."""
    if isinstance(version, int) and not isinstance(version, bool):
        if version > FORMAT_VERSION:
            return (
                f"format_version {version} is newer than this mtb reads (up to "
                f"{FORMAT_VERSION}); load it with the mtb release that wrote it or a newer one"
            )
        if version >= OLDEST:
            return None
    return f"format_version {version!r} is not a checkpoint format ({OLDEST} to {FORMAT_VERSION})"


def upgrade(document: dict) -> tuple[dict, int | None]:
    """The document in the current format, and the version it was upgraded from (or None)."""
    found = document["format_version"]
    while document["format_version"] < FORMAT_VERSION:
        document = UPGRADES[document["format_version"]](document)
    return document, (found if found != FORMAT_VERSION else None)
