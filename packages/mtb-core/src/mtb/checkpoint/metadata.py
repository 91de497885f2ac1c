"""metadata.json: what a checkpoint holds, how to check its files, and whether a run may load it.

Plain Python (no torch): ``mtb checkpoint list`` and ``inspect`` read it cheaply.
"""

import json
from pathlib import Path

from mtb import config as config_mod
from mtb.checkpoint import formats, layout
from mtb.errors import UsageError
from mtb.layout import MODEL_DIMS, Layout

FORMAT_VERSION = formats.FORMAT_VERSION

#: what a resume may change only where the backend reshards (dcp: one FQN-keyed state for
#: single, ddp, fsdp and nd alike)
RESHARDABLE = ("strategy", "strategy_options")
#: run settings that must equal the checkpoint's for a resume (world size is checked apart)
MUST_MATCH = (
    *RESHARDABLE,
    "model",
    "data.seed",
    "data.micro_batch_size",
    "training.precision",
    "training.grad_accum_steps",
    "training.optimizer",
)


class CheckpointError(UsageError):
    """A checkpoint that cannot be used: missing, incomplete, corrupt or incompatible."""


class FormatError(CheckpointError):
    """A format this mtb cannot resume: not damage, so ``latest`` refuses instead of skipping it."""


class NewerFormatError(FormatError):
    """Written by a newer mtb: this one cannot even read it."""


class OlderFormatError(FormatError):
    """Readable, but its weights mean something else to this mtb's model."""


def build(step_dir: Path, state: dict, config, world_size: int, backend: str, versions) -> dict:
    """The metadata document of a finished payload in ``step_dir`` (rank 0, all ranks done)."""
    covered = config_mod.fingerprint_fields(config)
    files = layout.file_digests(step_dir)
    return {
        "format_version": FORMAT_VERSION,
        "step": state["step"],
        "tokens_seen": state["tokens_seen"],
        "world_size": world_size,
        "layout": Layout.of(config, world_size).as_dict(),
        "strategy": config.strategy,
        "precision": config.training.precision,
        "backend": backend,
        "config_fingerprint": config_mod.fingerprint(config),
        "fingerprint_fields": covered,
        "config": config_mod.to_dict(config),
        "versions": versions,
        "created_utc": state["created_utc"],
        "contents": formats.contents(files, world_size, backend),
        "files": files,
    }


def read(step_dir: Path) -> dict:
    """metadata.json of ``step_dir`` in the current format, or a CheckpointError saying why not.

    An older format is upgraded in memory; ``upgraded_from`` then names it.
    """
    path = step_dir / layout.METADATA
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{step_dir}: no {layout.METADATA} (incomplete checkpoint)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: corrupt metadata ({error})") from None
    version = document.get("format_version") if isinstance(document, dict) else None
    problem = formats.problem(version)
    if problem:
        newer = isinstance(version, int) and version > FORMAT_VERSION
        raise (NewerFormatError if newer else CheckpointError)(f"{path}: {problem}")
    document, upgraded_from = formats.upgrade(document)
    return {**document, "upgraded_from": upgraded_from, "lacks": formats.lacking(document)}


def file_problems(step_dir: Path, document: dict) -> list[str]:
    """Files missing, unexpected, resized or altered against metadata.json (empty: intact)."""
    expected = document.get("files", {})
    present = set(layout.payload_files(step_dir))
    problems = [f"missing {name}" for name in sorted(set(expected) - present)]
    problems += [f"unexpected {name}" for name in sorted(present - set(expected))]
    for name in sorted(set(expected) & present):
        path = step_dir / name
        if path.stat().st_size != expected[name]["bytes"]:
            problems.append(
                f"{name}: {path.stat().st_size} bytes, expected {expected[name]['bytes']}"
            )
        elif layout.sha256_file(path) != expected[name]["sha256"]:
            problems.append(f"{name}: SHA256 differs from metadata.json")
    return problems


def metadata_problem(step_dir: Path, document: dict) -> str | None:
    """Why metadata.json does not match the digest READY holds (None: it does, or none is due).

    Checkpoints older than format 3 have an empty READY: nothing to check,
    and :func:`formats.lacking` makes their resume inexact.
    """
    if not (step_dir / layout.READY).is_file():
        return None
    recorded = layout.ready_digest(step_dir)
    if recorded is None:
        if document["contents"]["metadata_digest"]:
            return f"READY holds no digest of {layout.METADATA}"
        return None
    if recorded != layout.sha256_file(step_dir / layout.METADATA):
        return f"{layout.METADATA} does not match the SHA256 in READY (edited or damaged)"
    return None


def check_intact(step_dir: Path) -> dict:
    """The metadata of a READY checkpoint whose files all match it, else CheckpointError."""
    if not (step_dir / layout.READY).is_file():
        raise CheckpointError(f"{step_dir}: not READY (the save did not finish)")
    document = read(step_dir)
    problem = metadata_problem(step_dir, document)
    if problem:
        raise CheckpointError(f"{step_dir}: {problem}")
    problems = file_problems(step_dir, document)
    if problems:
        raise CheckpointError(
            f"{step_dir}: files do not match metadata.json: {'; '.join(problems)}"
        )
    return document


def check_resumable(step_dir: Path) -> dict:
    """The metadata of an intact checkpoint this mtb may resume, else CheckpointError."""
    document = check_intact(step_dir)
    refusal = formats.resume_refusal(document)
    if refusal:
        raise OlderFormatError(f"{step_dir}: {refusal}")
    return document


def _flatten(prefix: str, value) -> dict:
    if isinstance(value, dict):
        out = {}
        for key in sorted(value):
            out.update(_flatten(f"{prefix}.{key}" if prefix else key, value[key]))
        return out
    return {prefix: value}


def differences(document: dict, config, world_size: int, reshard_refusal: str | None):
    """(refusals, allowed changes): lines like ``world_size: checkpoint 2, run 4``.

    A different world size, layout or strategy is allowed only when the
    strategy's backend can reshard (``reshard_refusal`` is None), and never
    moved pipeline stages; total steps, cadence and paths may differ.
    """
    saved = _flatten("", {k: config_mod.select(document["config"], k) for k in MUST_MATCH})
    now = _flatten("", {k: config_mod.select(config_mod.to_dict(config), k) for k in MUST_MATCH})
    changed = [
        (key, f"{key}: checkpoint {saved.get(key)!r}, run {now.get(key)!r}")
        for key in sorted(set(saved) | set(now))
        if saved.get(key) != now.get(key)
    ]
    reshards = reshard_refusal is None
    refusals = [line for key, line in changed if not (reshards and key.startswith(RESHARDABLE))]
    allowed = [line for key, line in changed if reshards and key.startswith(RESHARDABLE)]
    if document["world_size"] != world_size:
        line = f"world_size: checkpoint {document['world_size']}, run {world_size}"
        if reshards:
            allowed.append(line)
        else:
            refusals.append(f"{line} ({reshard_refusal})")
    layout_line, layout_refused = layout_change(document, config, world_size)
    if layout_line:
        (refusals if layout_refused else allowed).append(layout_line)
    saved_fields = _flatten("", document.get("fingerprint_fields", {}))
    now_fields = _flatten("", config_mod.fingerprint_fields(config))
    allowed += [
        f"{key}: checkpoint {saved_fields[key]!r}, run {now_fields.get(key)!r}"
        for key in sorted(saved_fields)
        if saved_fields[key] != now_fields.get(key)
        and not any(key.startswith(m) for m in MUST_MATCH)
    ]
    return refusals, allowed


def layout_change(document: dict, config, world_size: int) -> tuple[str | None, bool]:
    """The line naming both layouts when they differ, and whether it is refused.

    DCP reshards data- and tensor-parallel state by parameter name; pipeline
    stages own different parameters, so moved stage boundaries are refused.
    """
    saved = saved_layout(document)
    now = Layout.of(config, world_size)
    saved_stages = saved["pp"] * _stages_per_rank(document["config"])
    stages = now.pp * config.parallel.pp_stages_per_rank
    same_dims = all(saved[dim] == getattr(now, dim) for dim in MODEL_DIMS)
    if same_dims and saved_stages == stages:
        return None, False  # data parallel over another world: the world_size line says it
    line = f"layout: checkpoint {saved['label']}, run {now.label}"
    if saved_stages != stages:
        return f"{line} (pipeline stages {saved_stages} vs {stages}: stage boundaries moved)", True
    return line, False


def saved_layout(document: dict) -> dict:
    """The layout a checkpoint was saved under (data parallel over its world before layouts)."""
    return document.get("layout") or Layout(dp_shard=document["world_size"]).as_dict()


def _stages_per_rank(saved_config: dict) -> int:
    return saved_config.get("parallel", {}).get("pp_stages_per_rank", 1)


def check_compatible(step_dir: Path, document: dict, config, world_size, reshard_refusal) -> list:
    """Raise CheckpointError listing every refused difference; return the allowed ones."""
    refusals, allowed = differences(document, config, world_size, reshard_refusal)
    if refusals:
        raise CheckpointError(
            f"checkpoint {step_dir.name} does not match this run: {'; '.join(refusals)}"
        )
    return allowed
