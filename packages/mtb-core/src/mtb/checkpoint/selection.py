"""Which checkpoint a ``--resume`` names, and why (plain Python, no torch).

``latest`` follows the pointer; when the pointer is missing, corrupt or
names a checkpoint that is not READY or whose files do not match its
metadata, the newest intact READY checkpoint is used instead and the reason
is said. An explicit step or path is used as given and fails loudly when it
is not intact. A checkpoint written in a newer format than this mtb reads,
or in an older one whose weights this model reads differently, is refused,
never skipped.
"""

from pathlib import Path

import attrs

from mtb.checkpoint import layout
from mtb.checkpoint.metadata import CheckpointError, FormatError, check_resumable


@attrs.frozen
class Choice:
    """The checkpoint to resume from (None: start from step 0) and why."""

    path: Path | None
    metadata: dict | None
    reason: str


def _pointer_problem(directory: Path) -> tuple[Path | None, str | None]:
    """The pointed-to checkpoint if intact, else (None, what is wrong with the pointer)."""
    name = layout.read_latest(directory)
    if name is None:
        return None, "no latest pointer"
    if not layout.STEP_PATTERN.match(name):
        return None, f"latest pointer is corrupt ({name[:40]!r})"
    try:
        check_resumable(directory / name)
    except FormatError:
        raise
    except CheckpointError as error:
        return None, f"latest names {name}, which is unusable: {error}"
    return directory / name, None


def newest_intact(directory: Path) -> tuple[Path | None, list[str]]:
    """The newest READY checkpoint whose files match metadata.json, and those skipped."""
    skipped = []
    for entry in reversed(layout.published(directory)):
        try:
            check_resumable(entry.path)
        except FormatError:
            raise
        except CheckpointError as error:
            skipped.append(str(error))
            continue
        return entry.path, skipped
    return None, skipped


def choose_latest(directory: Path) -> Choice:
    pointed, problem = _pointer_problem(directory)
    if problem is None and pointed is not None:
        return Choice(pointed, check_resumable(pointed), f"latest names {pointed.name}")
    found, skipped = newest_intact(directory)
    skipped_note = f"; skipped: {' | '.join(skipped)}" if skipped else ""
    if found is None:
        return Choice(None, None, f"{problem}; no READY checkpoint yet, starting at step 0")
    return Choice(
        found,
        check_resumable(found),
        f"{problem}; using the newest intact READY checkpoint {found.name}{skipped_note}",
    )


def choose(spec: str, directory: Path | None) -> Choice:
    """Resolve ``latest``, a step number, or a path to a step directory."""
    if spec != "latest" and not spec.isdigit():
        path = Path(spec)
    else:
        assert directory is not None, "validated: these name checkpoints in checkpoint.dir"
        if spec == "latest":
            return choose_latest(directory)
        path = directory / layout.step_name(int(spec))
    if not path.exists():
        raise CheckpointError(f"checkpoint.resume: {path} does not exist")
    return Choice(path, check_resumable(path), f"requested {path}")
