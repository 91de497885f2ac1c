"""Scenarios about the checkpoints on disk: config-mismatch, corrupt and retention."""

from mtb.checkpoint import layout
from mtb.fault.evidence import listing, ready_tree
from mtb.fault.outcome import Outcome
from mtb.fault.smoke import WORLD_SIZE, Smoke

MODEL_DIFF = "model.d_model: checkpoint 32, run 64"
WORLD_DIFF = f"world_size: checkpoint {WORLD_SIZE}, run 1"


def _refused(outcome: Outcome, run, what: str, diff: str) -> bool:
    line = run.launch.error_line() or ""
    return outcome.check(
        f"{what} is refused with exit 2 and the diff {diff!r}",
        run.launch.returncode == 2 and diff in line,
        {"exit_code": run.launch.returncode, "error_line": line},
    )


def config_mismatch(smoke: Smoke, outcome: Outcome) -> None:
    """Resume the reference's step 4 with another model size, then at another world size."""
    if not smoke.reference_ok(outcome):
        return
    source = str(smoke.reference_dir() / layout.step_name(4))
    model = smoke.train(outcome, "model", "--d-model", "64", "--resume", source, directory="m")
    _refused(outcome, model, "another model size", MODEL_DIFF)
    outcome.check(
        "nothing was trained or saved for the refused resume",
        not listing(smoke.folder(outcome.name) / "m"),
        listing(smoke.folder(outcome.name) / "m"),
    )
    world = smoke.train(outcome, "world", "--resume", source, nproc=1, directory="w")
    refusal = smoke.reshard_refusal()
    outcome.evidence["reshard_refusal"] = refusal
    if refusal is not None:
        _refused(outcome, world, "another world size", WORLD_DIFF)
        return
    outcome.check(
        f"another world size: the backend reshards, so it resumes inexact with {WORLD_DIFF!r}",
        world.launch.returncode == 0
        and world.resumed.get("exact") is False
        and WORLD_DIFF in world.resumed.get("allowed_changes", []),
        world.resumed,
    )


def _largest_payload(step_dir):
    files = [step_dir / name for name in layout.payload_files(step_dir)]
    return max(files, key=lambda path: path.stat().st_size)


def _damage(directory) -> dict:
    """Truncate step 6's largest shard to half; cut step 4's metadata.json mid-document."""
    shard = _largest_payload(directory / layout.step_name(6))
    size = shard.stat().st_size
    with open(shard, "r+b") as handle:
        handle.truncate(size // 2)
    meta = directory / layout.step_name(4) / layout.METADATA
    meta.write_text(meta.read_text()[:40], encoding="utf-8")
    return {
        "truncated": f"{shard.relative_to(directory)}: {size} -> {size // 2} bytes",
        "corrupted": f"{meta.relative_to(directory)}: cut to 40 characters",
    }


def _fails_on_every_rank(outcome: Outcome, run, what: str, words: tuple[str, ...]) -> None:
    errors = run.launch.rank_errors()
    outcome.check(
        f"explicit resume of {what} fails without hanging",
        run.launch.failed,
        {"exit_code": run.launch.returncode, "seconds": round(run.launch.seconds, 1)},
    )
    outcome.check(
        f"every rank says why ({what})",
        set(errors) == set(range(WORLD_SIZE))
        and all(all(w in text for w in words) for text in errors.values()),
        errors,
    )


def corrupt(smoke: Smoke, outcome: Outcome) -> None:
    """A truncated shard in step 6 (latest) and a corrupt metadata.json in step 4."""
    if not smoke.reference_ok(outcome):
        return
    directory = smoke.copy_reference(outcome, [2, 4, 6])
    outcome.evidence["damage"] = _damage(directory)
    for step, words in ((6, ("bytes, expected",)), (4, ("corrupt metadata",))):
        name = layout.step_name(step)
        run = smoke.train(outcome, f"explicit-{step}", "--resume", f"ckpt/{name}", steps=8)
        _fails_on_every_rank(outcome, run, name, (name, *words))
    latest = smoke.train(outcome, "latest", "--resume", "latest", save_every=None)
    reason = latest.resumed.get("reason", "")
    outcome.check(
        "--resume latest skips both damaged checkpoints to step 2 and says why",
        latest.launch.returncode == 0
        and latest.resumed.get("step") == 2
        and layout.step_name(6) in reason
        and layout.step_name(4) in reason,
        latest.resumed,
    )
    smoke.same_as_reference(outcome, "resume past the damage", latest)


def _abandon(smoke: Smoke, directory, step: int) -> str:
    """A temporary folder holding the reference's payload of ``step``, never published."""
    source = smoke.reference_dir() / layout.step_name(step)
    target = directory / layout.temporary_name(step)
    target.mkdir()
    for name in layout.payload_files(source):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes((source / name).read_bytes())
    return target.name


def retention(smoke: Smoke, outcome: Outcome) -> None:
    """``--keep-last 2`` over one READY checkpoint and two newer abandoned temporary folders."""
    if not smoke.reference_ok(outcome):
        return
    directory = smoke.copy_reference(outcome, [2])
    abandoned = [_abandon(smoke, directory, step) for step in (4, 6)]
    run = smoke.train(outcome, "kept", "--resume", "latest", "--keep-last", "2", steps=4)
    ready = [e.step for e in layout.published(directory)]
    left = [e.path.name for e in layout.abandoned(directory)]
    outcome.evidence["after_run"] = listing(directory)
    outcome.check(
        "the run saves step 4 and the older READY step 2 survives pruning",
        run.launch.returncode == 0 and run.saved_steps() == [4] and ready == [2, 4],
        {"ready_steps": ready, "saved": run.saved_steps()},
    )
    outcome.check(
        "abandoned folders are not counted and are left in place",
        set(abandoned) <= set(left),
        {"abandoned": abandoned, "present": left},
    )
    tree = ready_tree(directory)["digest"]
    cleaned = smoke.mtb(outcome, "clean", ["checkpoint", "clean", "ckpt"])
    outcome.evidence["after_clean"] = listing(directory)
    outcome.check(
        "`mtb checkpoint clean` removes exactly the abandoned folders",
        cleaned.returncode == 0
        and not layout.abandoned(directory)
        and [e.step for e in layout.published(directory)] == [2, 4]
        and ready_tree(directory)["digest"] == tree,
        cleaned.stdout.strip().splitlines(),
    )
