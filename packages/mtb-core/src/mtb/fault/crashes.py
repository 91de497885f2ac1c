"""Scenarios where a rank dies or training cannot go on: nan, kill-during-save,
rank-crash and auto-recovery."""

import re

from mtb.checkpoint import layout
from mtb.fault.evidence import listing, read_json, ready_tree
from mtb.fault.outcome import Outcome
from mtb.fault.smoke import Smoke

SIGKILL_LINE = re.compile(r"rank (\d+) failed: Signal 9 \(SIGKILL\)")
KILLED_RANK = 1


def _state_of(outcome: Outcome, directory) -> dict:
    """Steps, pointer and temporary folders of a checkpoint directory, into the evidence."""
    found = {
        "latest": layout.read_latest(directory),
        "ready_steps": [e.step for e in layout.published(directory)],
        "temporary": [e.path.name for e in layout.abandoned(directory)],
        "listing": listing(directory),
    }
    outcome.evidence.setdefault("directories", []).append(found)
    return found


def _killed(outcome: Outcome, run, what: str) -> bool:
    line = run.launch.error_line() or ""
    match = SIGKILL_LINE.search(line)
    return outcome.check(
        f"{what}: the launcher exits non-zero naming rank {KILLED_RANK} and SIGKILL",
        run.launch.failed and match and int(match.group(1)) == KILLED_RANK,
        line,
    )


def nan(smoke: Smoke, outcome: Outcome) -> None:
    """A NaN on rank 1 in the step that would reach the save at step 4."""
    run = smoke.train(outcome, "nan", "--inject-nan-at-step", "3", "--inject-nan-rank", "1")
    errors = run.launch.rank_errors()
    messages = set(errors.values())
    outcome.check("the run exits 1", run.launch.returncode == 1, run.launch.returncode)
    outcome.check(
        "every rank exits with the same non-finite error",
        set(errors) == set(range(2)) and len(messages) == 1 and "non-finite" in str(messages),
        errors,
    )
    message = next(iter(messages), "<none>")
    document = run.result or {}
    outcome.check(
        "the launcher's error line and the failure document carry that error",
        message in (run.launch.error_line() or "")
        and document.get("status") == "failed"
        and message in (document.get("error") or ""),
        {"error_line": run.launch.error_line(), "document_error": document.get("error")},
    )
    found = _state_of(outcome, smoke.folder(outcome.name) / "ckpt")
    outcome.check(
        "the latest READY checkpoint does not advance past the last good step",
        found["latest"] == layout.step_name(2) and found["ready_steps"] == [2],
        found,
    )
    outcome.check("no save of the failed step was started", not found["temporary"], found)
    saved = read_json(
        smoke.folder(outcome.name) / "ckpt" / layout.step_name(2) / "train_state.json"
    )
    outcome.check(
        "global step and scheduler stop at the last good step",
        saved and saved["step"] == 2 and saved["scheduler"]["step"] == 2,
        saved,
    )


def kill_during_save(smoke: Smoke, outcome: Outcome) -> None:
    """Rank 1 killed after writing its part of step 4, before publication."""
    if not smoke.reference_ok(outcome):
        return
    directory = smoke.folder(outcome.name) / "ckpt"
    run = smoke.train(outcome, "killed", "--inject-kill-at-step", "4", "--inject-kill-during-save")
    _killed(outcome, run, "kill during save")
    found = _state_of(outcome, directory)
    temporary = [e for e in layout.abandoned(directory) if e.step == 4]
    outcome.check(
        "step 4 stays a temporary folder without metadata.json or READY",
        len(temporary) == 1
        and not (temporary[0].path / layout.METADATA).exists()
        and not (temporary[0].path / layout.READY).exists()
        and 4 not in found["ready_steps"],
        found,
    )
    outcome.check("latest still names step 2", found["latest"] == layout.step_name(2), found)
    resumed = smoke.train(outcome, "resumed", "--resume", "latest")
    outcome.check(
        "resume picks the previous READY checkpoint, step 2",
        resumed.launch.returncode == 0 and resumed.resumed.get("step") == 2,
        resumed.resumed,
    )
    after = _state_of(outcome, directory)
    outcome.check(
        "the next saves succeed: steps 4 and 6 are READY",
        resumed.saved_steps() == [4, 6] and after["ready_steps"] == [2, 4, 6],
        after,
    )
    outcome.check(
        "the interrupted temporary folder is left as it was",
        temporary and temporary[0].path.name in after["temporary"],
        after["temporary"],
    )
    smoke.same_as_reference(outcome, "resumed run", resumed)


def rank_crash(smoke: Smoke, outcome: Outcome) -> None:
    """Rank 1 SIGKILLed mid-training, then a manual ``--resume latest``."""
    if not smoke.reference_ok(outcome):
        return
    directory = smoke.copy_reference(outcome, [2, 4])
    before = ready_tree(directory)
    crashed = smoke.train(
        outcome,
        "crashed",
        "--resume",
        "latest",
        "--inject-kill-at-step",
        "5",
        "--inject-kill-rank",
        str(KILLED_RANK),
    )
    _killed(outcome, crashed, "crash")
    after = ready_tree(directory)
    outcome.evidence["ready_tree"] = {"before": before, "after": after}
    outcome.check(
        "the READY checkpoint tree is identical before and after the crash",
        before["digest"] == after["digest"],
        {"before": before["digest"], "after": after["digest"]},
    )
    restarted = smoke.train(outcome, "restarted", "--resume", "latest")
    outcome.check(
        "the manual restart resumes at step 4 and finishes",
        restarted.launch.returncode == 0 and restarted.resumed.get("step") == 4,
        restarted.resumed,
    )
    smoke.same_as_reference(outcome, "manual restart", restarted)


def auto_recovery(smoke: Smoke, outcome: Outcome) -> None:
    """Rank 1 SIGKILLed after step 3 with one elastic restart allowed, no --resume given."""
    if not smoke.reference_ok(outcome):
        return
    run = smoke.train(outcome, "recovered", "--inject-kill-at-step", "3", "--max-restarts", "1")
    outcome.check(
        "the run exits 0 after the elastic restart",
        run.launch.returncode == 0 and (run.result or {}).get("status") == "ok",
        run.launch.returncode,
    )
    outcome.check(
        "the restarted workers resumed from latest (step 2) by themselves",
        run.resumed.get("step") == 2 and "latest" in run.resumed.get("reason", ""),
        run.resumed,
    )
    _state_of(outcome, smoke.folder(outcome.name) / "ckpt")
    smoke.same_as_reference(outcome, "recovered run", run)
