"""``mtb checkpoint verify LEFT RIGHT``: load two checkpoints as a run would, compare digests.

Each checkpoint is loaded by its own strategy at the world size it was saved
at, in workers started by the launch layer (in this process for a one-rank
``single`` checkpoint); rank 0 gathers every rank's digests of model,
optimizer, scheduler, train state and RNG. It sits above the trainer and the
launch layer, so that mtb.checkpoint needs neither.
"""

import json
import sys
from pathlib import Path

from mtb import config as config_mod
from mtb.checkpoint import metadata as meta
from mtb.checkpoint import verify


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


def digests_for(step_dir: Path, pm, device: str, timeout_s: float) -> dict:
    """Digests of one checkpoint: in this process for a one-rank ``single`` checkpoint,
    else in workers started by the launch layer."""
    import tempfile

    from mtb import launch

    config = verify.load_config(step_dir, device, timeout_s)
    groupless = pm.registry("strategy").get(config.strategy).max_world_size == 1
    if groupless and config.launch.world_size == 1:
        with launch.deadline(timeout_s):
            return digests_of(config, pm)
    with tempfile.TemporaryDirectory(prefix="mtb-verify-") as tmp:
        out = Path(tmp) / "digests.json"
        launch.spawn(config, "mtb.checkpoint_compare", str(out))
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
    differ = verify.differing(sides["left"]["digests"], sides["right"]["digests"])
    return verify.verify_document(
        f"checkpoints differ in: {', '.join(differ)}" if differ else None,
        verdict=f"identical: {', '.join(verify.COMPONENTS)}",
        identical=not differ,
        differing=differ,
        **sides,
    )


def main(argv: list[str] | None = None) -> int:
    """Worker entry: ``python -m mtb.checkpoint_compare CONFIG.json OUT.json``."""
    import os

    from mtb.launch import record_error
    from mtb.plugins import get_plugin_manager
    from mtb.reporting import write_atomic

    config_path, out = (argv or sys.argv[1:])[:2]
    try:
        config = config_mod.structure(json.loads(Path(config_path).read_text()))
        digests = digests_of(config, get_plugin_manager().settled())
    except Exception as error:
        record_error(error)
        return 1
    if os.environ.get("RANK", "0") == "0":
        write_atomic(out, json.dumps(digests, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    from mtb.launch import entry

    entry(main)
