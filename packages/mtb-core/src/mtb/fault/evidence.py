"""What a scenario shows: digests of READY trees, directory listings, state digest diffs.

Plain Python (no torch), so it is cheap to call between launches and to test.
"""

import hashlib
import json
from pathlib import Path

from mtb.checkpoint import layout


def ready_tree(directory: Path) -> dict:
    """SHA256 of every file of every READY step directory, and one digest over them all."""
    files = {
        str(path.relative_to(directory)): layout.sha256_file(path)
        for entry in layout.published(directory)
        for path in sorted(entry.path.rglob("*"))
        if path.is_file()
    }
    overall = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
    return {"digest": overall, "files": files}


def listing(directory: Path) -> list[str]:
    """Every path under ``directory``, relative and sorted; folders end in ``/``."""
    if not directory.is_dir():
        return []
    return sorted(
        str(path.relative_to(directory)) + ("/" if path.is_dir() else "")
        for path in directory.rglob("*")
    )


def differing(left: dict | None, right: dict | None) -> list[str]:
    """Components of two ``state_digests`` documents that differ (all when one is missing)."""
    if not left or not right:
        return ["state_digests missing"]
    return sorted(k for k in set(left) | set(right) if left.get(k) != right.get(k))


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
