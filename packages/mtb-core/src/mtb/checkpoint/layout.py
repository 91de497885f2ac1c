"""The checkpoint directory: names, digests, publication, the ``latest`` pointer, retention.

Layout (see docs/checkpoints.md)::

    DIR/latest                 text naming the newest published step, replaced atomically
    DIR/step_00000010/         published: metadata.json, then READY written last
    DIR/step_00000012.tmp-XY/  being written or abandoned; never resumed
    DIR/step_00000014.stale-20260101T000000Z/
                               moved aside by a resume (stale, damaged or incomplete); kept

Nothing here imports torch.
"""

import os
import re
import secrets
import shutil
import time
from pathlib import Path

import attrs

from mtb.digests import sha256_file
from mtb.reporting import write_atomic

READY = "READY"
METADATA = "metadata.json"
RNG_DIR = "rng"  # one file per rank, rank_00000.pt ...
TRAIN_STATE = "train_state.json"
#: human-readable summaries rendered from metadata.json (English, Chinese); not payload
SUMMARIES = ("metadata.md", "metadata_zh.md")
LATEST = "latest"
STEP_PATTERN = re.compile(r"^step_(\d{8})$")
TMP_PATTERN = re.compile(r"^step_(\d{8})\.tmp-[0-9a-f]+$")
#: why a resume moved a step directory out of its way
ASIDE_REASONS = ("stale", "damaged", "incomplete")
ASIDE_PATTERN = re.compile(r"^step_(\d{8})\.(stale|damaged|incomplete)-\d{8}T\d{6}Z(-\d+)?$")
#: write_atomic's temporary files of ``latest``, left behind by a process killed mid-write
LATEST_TMP_GLOB = f".{LATEST}.*.tmp"


def step_name(step: int) -> str:
    return f"step_{step:08d}"


def temporary_name(step: int) -> str:
    return f"{step_name(step)}.tmp-{secrets.token_hex(4)}"


@attrs.frozen
class Entry:
    """One step directory (published or temporary) found in a checkpoint directory."""

    path: Path
    step: int
    temporary: bool
    #: why it was moved aside (None: a step or temporary directory in place)
    aside: str | None = None

    @property
    def ready(self) -> bool:
        return not self.temporary and self.aside is None and (self.path / READY).is_file()

    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())

    def age_s(self) -> float:
        return time.time() - self.path.stat().st_mtime


def scan(directory: Path) -> list[Entry]:
    """Every step directory under ``directory``, oldest step first."""
    if not directory.is_dir():
        return []
    entries = []
    for child in directory.iterdir():
        for pattern, temporary in ((STEP_PATTERN, False), (TMP_PATTERN, True)):
            match = pattern.match(child.name)
            if match and child.is_dir():
                entries.append(Entry(child, int(match.group(1)), temporary))
        aside = ASIDE_PATTERN.match(child.name)
        if aside and child.is_dir():
            entries.append(Entry(child, int(aside.group(1)), False, aside.group(2)))
    return sorted(entries, key=lambda e: (e.step, e.temporary, e.path.name))


def in_place(directory: Path) -> list[Entry]:
    """``step_N`` directories, READY or not (neither temporary nor moved aside)."""
    return [e for e in scan(directory) if not e.temporary and e.aside is None]


def move_aside(path: Path, reason: str) -> Path:
    """Rename a step directory to ``step_N.REASON-UTCSTAMP`` (kept, never resumed)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.{reason}-{stamp}")
    count = 1
    while target.exists():
        count += 1
        target = path.with_name(f"{path.name}.{reason}-{stamp}-{count}")
    os.rename(path, target)
    return target


def published(directory: Path) -> list[Entry]:
    """READY checkpoints, oldest first."""
    return [e for e in scan(directory) if e.ready]


def abandoned(directory: Path) -> list[Entry]:
    """Temporary directories: saves in progress or interrupted; they never count as kept."""
    return [e for e in scan(directory) if e.temporary]


def payload_files(step_dir: Path) -> list[str]:
    """Every file of a checkpoint but metadata.json, its summaries and READY, sorted."""
    skip = {METADATA, READY, *SUMMARIES}
    return sorted(
        str(f.relative_to(step_dir))
        for f in step_dir.rglob("*")
        if f.is_file() and f.name not in skip
    )


def file_digests(step_dir: Path) -> dict[str, dict]:
    """SHA256 and size of every payload file."""
    return {
        name: {"sha256": sha256_file(step_dir / name), "bytes": (step_dir / name).stat().st_size}
        for name in payload_files(step_dir)
    }


def ready_text(step_dir: Path) -> str:
    """READY's content: the SHA256 of metadata.json, in ``sha256sum`` format."""
    return f"{sha256_file(step_dir / METADATA)}  {METADATA}\n"


def ready_digest(step_dir: Path) -> str | None:
    """The metadata.json digest READY holds (None: an empty READY, as before format 3)."""
    words = (step_dir / READY).read_text(encoding="utf-8", errors="replace").split()
    return words[0] if words else None


def publish(tmp_dir: Path, step: int) -> Path:
    """Rename a finished temporary directory to its step name, then write READY.

    READY holds the digest of metadata.json, so an edited metadata.json is
    detected. An existing step directory is never replaced: that is an error.
    """
    final = tmp_dir.parent / step_name(step)
    if final.exists():
        raise FileExistsError(f"{final.name} already exists; a checkpoint is never overwritten")
    os.rename(tmp_dir, final)
    write_atomic(final / READY, ready_text(final))
    _fsync_dir(final.parent)
    return final


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_latest(directory: Path) -> str | None:
    """The step name the ``latest`` pointer holds (None when missing or unreadable)."""
    try:
        return (directory / LATEST).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def write_latest(directory: Path, step: int) -> None:
    write_atomic(directory / LATEST, step_name(step) + "\n")


def prune(directory: Path, keep_last: int) -> list[Path]:
    """Remove the oldest READY checkpoints beyond ``keep_last`` (0 keeps all).

    Only READY checkpoints count and are removed; the newest READY one always
    stays; temporary directories are left for ``mtb checkpoint clean``.
    """
    if keep_last <= 0:
        return []
    ready = published(directory)
    doomed = ready[: max(0, len(ready) - keep_last)]
    for entry in doomed:
        shutil.rmtree(entry.path)
    return [entry.path for entry in doomed]
