"""``mtb fault smoke``, its damage half: every scenario passes on 2 real ranks, and its evidence
shows why.

The smoke of launcher-kill, corrupt, retention, stale-steps, two-writers and disk-full runs
once for the module; each test then reads one scenario's checks and evidence from its
document. The other half is test_fault_smoke.py (tests/fault_smoke.py says why two halves).
"""

import pytest
from fault_smoke import DAMAGE, RANK_LINE, check_document, detail, passed, run_smoke

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return run_smoke(tmp_path_factory, DAMAGE)


def test_the_document_and_the_exit_code(smoke):
    check_document(smoke, DAMAGE)


def test_launcher_kill_leaves_no_worker_and_publishes_nothing_after(smoke):
    scenario = passed(smoke[2], "launcher-kill")
    (run,) = scenario["launches"]
    assert run["exit_code"] == -9 and "--steps 100000" in run["command"]
    assert len(detail(scenario, "the run trained with 2 workers")) == 2
    assert detail(scenario, "every worker was gone")["survivors"] == []
    ckpt = scenario["evidence"]["ckpt"]
    assert "latest" in ckpt["after_kill"] and ckpt["later"] == ckpt["after_kill"]


def test_corrupt_checkpoints_fail_on_every_rank_and_latest_skips_them(smoke):
    scenario = passed(smoke[2], "corrupt")
    shard, meta, latest = scenario["launches"]
    for launch in (shard, meta):
        assert launch["exit_code"] not in (0, None) and launch["seconds"] < 90
        ranks = {m.group(1) for m in map(RANK_LINE.match, launch["stderr"]) if m}
        assert ranks == {"0", "1"}
    assert any("bytes, expected" in line for line in shard["stderr"])
    assert any("corrupt metadata" in line for line in meta["stderr"])
    assert latest["exit_code"] == 0
    assert "step_00000002" in detail(scenario, "--resume latest skips")["path"]


def test_retention_keeps_the_ready_checkpoint_and_clean_removes_the_abandoned(smoke):
    scenario = passed(smoke[2], "retention")
    after_run, after_clean = scenario["evidence"]["after_run"], scenario["evidence"]["after_clean"]
    assert "step_00000002/READY" in after_run and "step_00000004/READY" in after_run
    temporary = [n for n in after_run if ".tmp-" in n and n.endswith("/") and n.count("/") == 1]
    assert len(temporary) == 2
    assert not any(".tmp-" in name for name in after_clean)
    assert "step_00000002/READY" in after_clean


def test_stale_steps_are_moved_aside_and_the_resume_finishes(smoke):
    scenario = passed(smoke[2], "stale-steps")
    moved = detail(scenario, "step 4 (stale)")
    assert [m["reason"] for m in moved] == ["stale", "incomplete"]
    resumed, _ = scenario["launches"]
    (line,) = [x for x in resumed["stderr"] if x.startswith("mtb: cleared the way")]
    assert f"{moved[0]['source']} -> {moved[0]['target']}" in line  # stored up to 400 characters
    after_run, after_clean = scenario["evidence"]["after_run"], scenario["evidence"]["after_clean"]
    assert f"{moved[0]['target']}/READY" in after_run  # the stale step is kept as it was
    assert not any(".stale-" in name for name in after_clean)
    removed = detail(scenario, "`mtb checkpoint clean`")
    assert all(any(m["target"] in x and "removed" in x for x in removed) for m in moved)
    assert detail(scenario, "resume past the stale steps")["differing"] == []


def test_two_writers_refuse_the_second_naming_the_first(smoke):
    scenario = passed(smoke[2], "two-writers")
    first, second, cleaning = scenario["launches"]
    assert second["exit_code"] == 2 and "is in use by mtb run (pid " in second["stderr"][-1]
    assert cleaning["exit_code"] == 2 and "is in use by mtb run (pid " in cleaning["stderr"][-1]
    assert first["exit_code"] == 0


def test_disk_full_says_so_in_one_line(smoke):
    scenario = passed(smoke[2], "disk-full")
    (full,) = scenario["launches"]
    assert full["exit_code"] == 1 and "No space left on device" in full["stderr"][-1]
    assert "--resume latest" in full["command"]
