"""Clearing the way for a resumed run, and what ``mtb checkpoint clean`` removes.

A resumed run saves the steps after its resume point again; a ``step_N``
directory already there (newer than a lagging ``latest``, damaged, or never
made READY) would stop that save. Such directories are moved aside (renamed
``step_N.REASON-UTCSTAMP``, kept, never resumed) and ``latest`` is repaired
to the resume point. ``clean`` removes what nothing can resume: temporary and
moved-aside directories, damaged or unfinished step directories, and
``latest`` leftovers. Plain Python (no torch).
"""

from pathlib import Path

import attrs

from mtb.checkpoint import layout
from mtb.checkpoint.metadata import CheckpointError, NewerFormatError, check_intact


@attrs.frozen
class Moved:
    """One step directory moved out of a resumed run's way."""

    source: str
    target: str
    reason: str
    why: str


def unusable(entry: layout.Entry) -> tuple[str, str] | None:
    """(incomplete|damaged, why) for a step directory nothing can resume, None when intact.

    A checkpoint of a newer format is not damage: it counts as intact here.
    """
    if not (entry.path / layout.READY).is_file():
        return "incomplete", "not READY"
    try:
        check_intact(entry.path)
    except NewerFormatError:
        return None
    except CheckpointError as error:
        return "damaged", str(error).removeprefix(f"{entry.path}: ")
    return None


def clear_after(directory: Path, step: int) -> list[Moved]:
    """Move aside every ``step_N`` with N > ``step`` (0: no resume point, all of them)."""
    moved = []
    for entry in layout.in_place(directory):
        if entry.step <= step:
            continue
        reason, why = unusable(entry) or ("stale", "READY, newer than the resume point")
        target = layout.move_aside(entry.path, reason)
        moved.append(Moved(entry.path.name, target.name, reason, why))
    return moved


def repair_latest(directory: Path, step: int) -> str | None:
    """Point ``latest`` at the resume point (remove it without one); what changed, or None."""
    before = layout.read_latest(directory)
    after = layout.step_name(step) if step else None
    if before == after:
        return None
    if after is None:
        (directory / layout.LATEST).unlink(missing_ok=True)
    else:
        layout.write_latest(directory, step)
    return f"latest {before or 'missing'} -> {after or 'removed'}"


def clear_way(directory: Path, step: int, resumed_from: Path | None) -> dict:
    """Before a run resumed at ``step`` saves into ``directory``: move aside, repair latest.

    ``latest`` is repaired only when the resume point lies in ``directory``
    (or there is none): a checkpoint resumed from elsewhere is not named by it.
    """
    moved = clear_after(directory, step)
    here = resumed_from is None or resumed_from.resolve().parent == directory.resolve()
    latest = repair_latest(directory, step) if here else None
    return {"moved_aside": [attrs.asdict(m) for m in moved], "latest": latest}


def announcement(directory: Path, cleared: dict) -> str | None:
    """One line saying what was moved aside and how ``latest`` was repaired (None: nothing)."""
    moved = cleared["moved_aside"]
    if not moved and not cleared["latest"]:
        return None
    parts = [f"{m['source']} -> {m['target']} ({m['why']})" for m in moved]
    if cleared["latest"]:
        parts.append(cleared["latest"])
    hint = f"; remove with `mtb checkpoint clean {directory}`" if moved else ""
    return f"mtb: cleared the way in {directory}: {'; '.join(parts)}{hint}"


@attrs.frozen
class CleanPlan:
    """What ``mtb checkpoint clean`` removes, and what becomes of ``latest``."""

    doomed: list[tuple[Path, str]]
    latest: str | None
    latest_step: int | None


def newest_intact_step(entries: list[layout.Entry], damaged: set[Path]) -> int | None:
    ready = [e.step for e in entries if e.ready and e.path not in damaged]
    return max(ready) if ready else None


def plan_clean(directory: Path) -> CleanPlan:
    """Temporary, moved-aside, unfinished and damaged step directories, ``latest`` leftovers."""
    doomed = []
    for entry in layout.scan(directory):
        if entry.temporary:
            doomed.append((entry.path, "temporary"))
        elif entry.aside is not None:
            doomed.append((entry.path, f"moved aside: {entry.aside}"))
        elif problem := unusable(entry):
            doomed.append((entry.path, f"{problem[0]}: {problem[1]}"))
    doomed += [(p, "leftover temporary pointer") for p in directory.glob(layout.LATEST_TMP_GLOB)]
    step = newest_intact_step(layout.scan(directory), {path for path, _ in doomed})
    name = layout.step_name(step) if step is not None else None
    current = layout.read_latest(directory)
    stale = (directory / layout.LATEST).exists() and current != name
    latest = f"latest {current or 'unreadable'} -> {name or 'removed'}" if stale else None
    return CleanPlan(doomed, latest, step)


def apply_clean(directory: Path, plan: CleanPlan) -> None:
    import shutil

    for path, _ in plan.doomed:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    if plan.latest:
        repair_latest(directory, plan.latest_step or 0)
