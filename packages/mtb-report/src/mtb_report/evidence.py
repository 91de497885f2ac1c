"""The evidence manifest: which result files back a claim, and whether they still do.

``manifest`` records each result file's SHA256 and identity; ``verify``
recomputes them and lists added, missing and altered files.
"""

import hashlib
import os
from pathlib import Path

from mtb.api import UsageError
from mtb_report import grouping
from mtb_report.loading import MANIFEST_KIND, check_document, read_json

MANIFEST_VERSION = 1


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def environment_profile(document: dict) -> dict:
    environment = document.get("environment") or {}
    provenance = document.get("provenance") or {}
    return {
        "device": environment.get("device"),
        "device_model": grouping.device_model(provenance),
        "world_size": environment.get("world_size"),
        "backend": environment.get("backend"),
        "torch": provenance.get("torch"),
        "hostname": provenance.get("hostname"),
    }


def entry(root: Path, path: Path) -> dict:
    document = check_document(path, read_json(path))
    provenance = document.get("provenance") or {}
    git = provenance.get("git") or {}
    return {
        "path": path.relative_to(root).as_posix(),
        "sha256": sha256(path),
        "bytes": path.stat().st_size,
        "kind": document["kind"],
        "status": document["status"],
        "command": provenance.get("command"),
        "git_revision": git.get("revision"),
        "git_dirty": git.get("dirty"),
        "image": grouping.image(provenance),
        "environment_profile": environment_profile(document),
    }


def json_files(root: Path, manifest_path: Path) -> list[Path]:
    """Every JSON file under ``root`` but the manifest itself (read or not: tampering counts)."""
    own = manifest_path.resolve()
    return [p for p in sorted(root.rglob("*.json")) if p.resolve() != own]


def build_manifest(root: Path, manifest_path: Path) -> dict:
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    relative_root = os.path.relpath(root.resolve(), manifest_path.resolve().parent)
    return {
        "kind": MANIFEST_KIND,
        "manifest_version": MANIFEST_VERSION,
        "root": Path(relative_root).as_posix(),
        "files": [entry(root, p) for p in json_files(root, manifest_path)],
    }


def read_manifest(manifest_path: Path) -> dict:
    """The manifest at ``manifest_path``, or one UsageError naming what it lacks."""
    manifest = read_json(manifest_path)
    if (
        manifest.get("kind") != MANIFEST_KIND
        or manifest.get("manifest_version") != MANIFEST_VERSION
    ):
        raise UsageError(
            f"{manifest_path}: not an evidence manifest of version {MANIFEST_VERSION} "
            "(write one with `mtb evidence manifest`)"
        )
    files = manifest.get("files")
    if not isinstance(manifest.get("root"), str):
        raise UsageError(f"{manifest_path}: root: missing or not a path")
    if not isinstance(files, list) or not all(
        isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("sha256"), str)
        for f in files
    ):
        raise UsageError(
            f"{manifest_path}: files: missing or not a list of {{path, sha256}} entries"
        )
    return manifest


def verify(manifest_path: Path) -> dict[str, list[str]]:
    """Added, missing and altered paths (relative to the manifest's root)."""
    manifest = read_manifest(manifest_path)
    root = manifest_path.parent / manifest["root"]
    recorded = {f["path"]: f["sha256"] for f in manifest["files"]}
    present = (
        {p.relative_to(root).as_posix(): p for p in json_files(root, manifest_path)}
        if root.is_dir()
        else {}
    )
    return {
        "added": sorted(set(present) - set(recorded)),
        "missing": sorted(set(recorded) - set(present)),
        "altered": sorted(
            path for path in set(recorded) & set(present) if sha256(present[path]) != recorded[path]
        ),
    }
