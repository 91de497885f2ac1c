"""Evidence manifest: what it records, and that verify catches added, missing, altered files."""

import json
import shutil

import pytest
from report_fixtures import RUNS


@pytest.fixture
def evidence(tmp_path, invoke):
    root = tmp_path / "results"
    shutil.copytree(RUNS, root)
    manifest = tmp_path / "evidence_manifest.json"
    done = invoke("evidence", "manifest", root, "-o", manifest)
    assert done.exit_code == 0, done.output
    return root, manifest


def test_manifest_records_digest_and_provenance(evidence):
    manifest = evidence[1]
    entries = {e["path"]: e for e in json.loads(manifest.read_text())["files"]}
    assert sorted(entries) == sorted(p.name for p in RUNS.glob("*.json"))
    ddp = entries["ddp-w2.json"]
    assert ddp["kind"] == "train" and ddp["status"] == "ok"
    assert ddp["command"].startswith("mtb run --strategy ddp")
    assert len(ddp["sha256"]) == 64 and ddp["git_revision"] and ddp["git_dirty"] is True
    assert ddp["environment_profile"]["world_size"] == 2
    assert entries["ddp-w2-timeout.json"]["status"] == "timeout"


def test_untouched_evidence_verifies(evidence, invoke):
    done = invoke("evidence", "verify", evidence[1])
    assert done.exit_code == 0 and "verified: no changes" in done.output


def test_added_missing_and_altered_files_fail(evidence, invoke):
    root, manifest = evidence
    (root / "extra.json").write_text("{}")
    (root / "fsdp-w2.json").unlink()
    ddp = root / "ddp-w2.json"
    ddp.write_text(ddp.read_text().replace('"status": "ok"', '"status": "failed"', 1))
    done = invoke("evidence", "verify", manifest)
    assert done.exit_code == 1
    assert "added: extra.json" in done.output
    assert "missing: fsdp-w2.json" in done.output
    assert "altered: ddp-w2.json" in done.output


def test_manifest_inside_its_directory_excludes_itself(tmp_path, invoke):
    root = tmp_path / "results"
    shutil.copytree(RUNS, root)
    assert (
        invoke("evidence", "manifest", root, "-o", root / "evidence_manifest.json").exit_code == 0
    )
    assert invoke("evidence", "verify", root / "evidence_manifest.json").exit_code == 0


def test_verify_rejects_a_non_manifest(invoke):
    done = invoke("evidence", "verify", RUNS / "ddp-w2.json")
    assert done.exit_code == 2 and "not an evidence manifest" in done.output


@pytest.mark.timeout(60)
def test_outputs_are_checked_before_anything_is_read(tmp_path, invoke):
    """``-o`` naming a directory (``DIR.md``) or a path under a file: one line, exit 2."""
    (tmp_path / "DIR.md").mkdir()
    (tmp_path / "file").write_text("x")
    cases = [
        (["report", RUNS, "-o", tmp_path / "DIR.md"], "is a directory"),
        (["evidence", "manifest", RUNS, "-o", tmp_path / "file" / "m.json"], "not a directory"),
    ]
    for args, problem in cases:
        done = invoke(*args)
        assert done.exit_code == 2, done.output
        assert done.output.strip().splitlines() == [done.output.strip()], done.output
        assert done.output.startswith("Error: --output: ") and problem in done.output


FILES_PROBLEM = "files: missing or not a list of {path, sha256} entries"
BROKEN_MANIFESTS = [
    ({"root": "."}, FILES_PROBLEM),
    ({"root": ".", "files": {"a.json": "0" * 64}}, FILES_PROBLEM),
    ({"root": ".", "files": [{"path": "a.json"}]}, FILES_PROBLEM),
    ({"files": []}, "root: missing or not a path"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("broken, problem", BROKEN_MANIFESTS)
def test_verify_of_a_manifest_without_usable_files_is_one_line(tmp_path, invoke, broken, problem):
    manifest = tmp_path / "evidence_manifest.json"
    header = {"kind": "evidence_manifest", "manifest_version": 1}
    manifest.write_text(json.dumps({**header, **broken}))
    done = invoke("evidence", "verify", manifest)
    assert done.exit_code == 2, done.output
    assert done.output.strip().splitlines() == [f"Error: {manifest}: {problem}"]
