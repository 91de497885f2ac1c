"""SHA256 of files, streamed: one definition for checkpoints, fault evidence and datasets."""

import hashlib
from pathlib import Path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_record(path: Path) -> dict:
    """What a result records of a file it read: path, SHA256 and size."""
    return {"path": str(path), "sha256": sha256_file(path), "bytes": path.stat().st_size}
