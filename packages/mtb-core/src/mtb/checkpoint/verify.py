"""``mtb checkpoint verify``: load two checkpoints as a run would and compare their digests.

Each checkpoint is loaded by its own strategy at the world size it was saved
at (workers started like ``mtb run``'s); rank 0 gathers every rank's digests
of model, optimizer, scheduler, train state and RNG.
"""

import json
import sys
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


def digests_of(config, pm) -> dict:
    """Every rank: build the engine, load the checkpoint, digest it; rank 0 gets all ranks'."""
    from mtb import distributed
    from mtb.checkpoint import lifecycle, state
    from mtb.engine import make_optimizer
    from mtb.trainer import build_model

    context = distributed.setup(config)
    strategy = pm.registry("strategy").get(config.strategy)
    model = build_model(context)
    engine = strategy.setup(model, lambda p: make_optimizer(p, config.training), context)
    backend = lifecycle.backend_for(pm, config, strategy)
    step_dir = Path(config.checkpoint.resume)
    backend.load(engine, step_dir, context)
    saved, _ = state.with_scheduler(state.load_train_state(step_dir), config.training)
    rng = state.load_rng(step_dir, context.rank)
    gathered = distributed.gather(context, state.local_digests(engine, backend, saved, rng))
    distributed.teardown(context)
    return state.combine_digests(gathered)


def differing(left: dict, right: dict) -> list[str]:
    return [name for name in COMPONENTS if left.get(name) != right.get(name)]


def digests_for(step_dir: Path, pm, device: str, timeout_s: float) -> dict:
    """Digests of one checkpoint: in this process for a one-rank ``single`` checkpoint,
    else in workers started by the launcher."""
    import tempfile

    from mtb import launcher

    config = load_config(step_dir, device, timeout_s)
    groupless = pm.registry("strategy").get(config.strategy).max_world_size == 1
    if groupless and config.launch.world_size == 1:
        with launcher.deadline(timeout_s):
            return digests_of(config, pm)
    with tempfile.TemporaryDirectory(prefix="mtb-verify-") as tmp:
        out = Path(tmp) / "digests.json"
        launcher.spawn(config, "mtb.checkpoint.verify", str(out))
        return json.loads(out.read_text())


def diagnosis(left: Path, right: Path, pm, device: str, timeout_s: float) -> dict:
    """The verify document: both sides' digests and the components that differ."""
    sides = {}
    for name, path in (("left", left), ("right", right)):
        document = meta.check_intact(path)
        sides[name] = {
            "path": str(path),
            "step": document["step"],
            "world_size": document["world_size"],
            "strategy": document["strategy"],
            "digests": digests_for(path, pm, device, timeout_s),
        }
    differ = differing(sides["left"]["digests"], sides["right"]["digests"])
    return _document(
        f"checkpoints differ in: {', '.join(differ)}" if differ else None,
        verdict=f"identical: {', '.join(COMPONENTS)}",
        identical=not differ,
        differing=differ,
        **sides,
    )


def self_check(step_dir: Path) -> dict:
    """The verify document of one checkpoint: READY and its files match metadata.json."""
    try:
        document = meta.check_intact(step_dir)
    except meta.CheckpointError as error:
        return _document(str(error), verdict="", path=str(step_dir))
    files = len(document["files"])
    return _document(
        None,
        verdict=f"intact: READY, {files} file(s) match their SHA256 digests in metadata.json",
        path=str(step_dir),
        step=document["step"],
        files_checked=files,
    )


def _document(error: str | None, **fields) -> dict:
    from mtb.documents import document_provenance, result_document

    status = "failed" if error else "ok"
    return result_document(
        "checkpoint_verify",
        status=status,
        error=error,
        provenance=document_provenance([]),
        **fields,
    )


def main(argv: list[str] | None = None) -> int:
    """Worker entry: ``python -m mtb.checkpoint.verify CONFIG.json OUT.json``."""
    import os

    from mtb.plugins import get_plugin_manager
    from mtb.reporting import write_atomic
    from mtb.worker import record_error

    config_path, out = (argv or sys.argv[1:])[:2]
    try:
        config = config_mod.structure(json.loads(Path(config_path).read_text()))
        digests = digests_of(config, get_plugin_manager())
    except Exception as error:
        record_error(error)
        return 1
    if os.environ.get("RANK", "0") == "0":
        write_atomic(out, json.dumps(digests, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    from mtb.worker import entry

    entry(main)
