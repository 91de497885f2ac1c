"""The pure parts of ``mtb fault smoke``: READY-tree digests, listings, stderr parsing,
verdicts, and the command's refusals (the smoke itself runs in tests/test_fault_smoke.py and
tests/test_fault_smoke_damage.py)."""

from mtb.checkpoint import layout
from mtb.fault.evidence import differing, listing, ready_tree
from mtb.fault.launch import Launch
from mtb.fault.outcome import Outcome


def _checkpoint(directory, step, ready=True, payload=b"weights"):
    path = directory / layout.step_name(step)
    (path / "dcp").mkdir(parents=True)
    (path / "dcp" / "__0_0.distcp").write_bytes(payload)
    (path / layout.METADATA).write_text("{}")
    if ready:
        (path / layout.READY).write_text("")
    return path


def test_ready_tree_covers_every_file_of_ready_checkpoints_only(tmp_path):
    _checkpoint(tmp_path, 2)
    first = ready_tree(tmp_path)
    assert set(first["files"]) == {
        "step_00000002/READY",
        "step_00000002/dcp/__0_0.distcp",
        "step_00000002/metadata.json",
    }
    _checkpoint(tmp_path, 4, ready=False)
    temporary = tmp_path / layout.temporary_name(6)
    temporary.mkdir()
    (temporary / "x").write_bytes(b"partial")
    assert ready_tree(tmp_path) == first


def test_ready_tree_digest_changes_with_any_byte_of_a_ready_checkpoint(tmp_path):
    shard = _checkpoint(tmp_path, 2) / "dcp" / "__0_0.distcp"
    before = ready_tree(tmp_path)["digest"]
    shard.write_bytes(b"weightz")
    assert ready_tree(tmp_path)["digest"] != before
    shard.write_bytes(b"weights")
    assert ready_tree(tmp_path)["digest"] == before


def test_listing_is_relative_and_marks_folders(tmp_path):
    _checkpoint(tmp_path, 2, ready=False)
    assert listing(tmp_path) == [
        "step_00000002/",
        "step_00000002/dcp/",
        "step_00000002/dcp/__0_0.distcp",
        "step_00000002/metadata.json",
    ]
    assert listing(tmp_path / "missing") == []


def test_differing_names_components_and_a_missing_side():
    left = {"model": "a", "rng": ["x", "y"]}
    assert differing(left, dict(left)) == []
    assert differing(left, {"model": "a", "rng": ["x", "z"]}) == ["rng"]
    assert differing(None, left) == ["state_digests missing"]


STDERR = """mtb run: strategy ddp, preset tiny, 0.03M parameters, world size 2
Training ━━━━━━━━ 3/6
mtb: resuming at step 2 from ckpt/step_00000002 (latest names step_00000002; exact)
mtb: rank 1: non-finite loss on rank(s) 1 at step 3; no optimizer step was taken
mtb: rank 0: non-finite loss on rank(s) 1 at step 3; no optimizer step was taken
Error: rank 1 failed: non-finite loss on rank(s) 1 at step 3; no optimizer step was taken
"""


def test_launch_keeps_key_lines_and_each_ranks_error():
    done = Launch("nan", ["run"], 1, 1.0, "", STDERR)
    assert done.failed and not done.timed_out
    assert len(done.key_lines()) == 4
    message = "non-finite loss on rank(s) 1 at step 3; no optimizer step was taken"
    assert done.rank_errors() == {0: message, 1: message}
    assert done.error_line() == f"Error: rank 1 failed: {message}"
    assert done.evidence()["command"] == "mtb run"


def test_a_killed_launch_is_a_timeout_not_a_failure():
    done = Launch("hung", ["run"], None, 9.0, "", "")
    assert done.timed_out and not done.failed
    assert done.evidence()["exit_code"] is None


def test_outcome_passes_only_with_checks_that_all_held():
    outcome = Outcome("x")
    assert not outcome.passed
    assert outcome.check("held", True)
    assert outcome.passed
    assert not outcome.check("broke", 0, {"seen": 0})
    assert not outcome.passed
    assert outcome.document()["status"] == "failed"


def test_outcome_with_an_error_fails():
    outcome = Outcome("x")
    outcome.check("held", True)
    outcome.error = "KeyError: 'step'"
    assert not outcome.passed and outcome.document()["error"] == "KeyError: 'step'"


def test_unknown_scenarios_are_refused_with_the_valid_names(invoke):
    result = invoke("fault", "smoke", "--scenarios", "nan,bogus")
    assert result.exit_code == 2
    assert "unknown bogus; choose from nan,kill-during-save,config-mismatch" in result.output


def test_a_one_rank_strategy_is_refused(invoke, tmp_path):
    result = invoke("fault", "smoke", "--strategy", "single", "--workdir", tmp_path / "w")
    assert result.exit_code == 2
    assert "'single' runs on one rank; the smokes need 2" in result.output


def test_a_non_empty_workdir_is_refused(invoke, tmp_path):
    (tmp_path / "old").write_text("")
    result = invoke("fault", "smoke", "--strategy", "single", "--workdir", tmp_path)
    assert result.exit_code == 2


def test_a_launch_under_a_file_size_cap_writes_no_bytecode(monkeypatch):
    """A .pyc cut short at the cap would break every later import of its module."""
    from mtb.fault.launch import _child_env

    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    assert _child_env(200_000)["PYTHONDONTWRITEBYTECODE"] == "1"
    assert "PYTHONDONTWRITEBYTECODE" not in _child_env(None)
