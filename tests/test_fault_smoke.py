"""``mtb fault smoke``: every scenario passes on 2 real ranks, and its evidence shows why.

The smoke runs once for the module (about 20 launches of the tiny preset);
each test then reads one scenario's checks and evidence from its document.
"""

import json
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(1500)
RANK_LINE = re.compile(r"^mtb: rank (\d+): ")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    root = tmp_path_factory.mktemp("fault")
    output = root / "fault.json"
    flags = ["--output", output, "--timeout", "90"]
    done = subprocess.run(
        [sys.executable, "-m", "mtb", "fault", "smoke", "--workdir", root / "runs", *flags],
        capture_output=True,
        text=True,
        timeout=1440,
    )
    document = json.loads(output.read_text())
    return done, document, {s["name"]: s for s in document["scenarios"]}


def _passed(scenarios, name) -> dict:
    scenario = scenarios[name]
    failed = [c for c in scenario["checks"] if not c["ok"]]
    assert scenario["status"] == "passed", (failed, scenario["error"], scenario["launches"])
    return scenario


def _detail(scenario, starts: str):
    return next(c["detail"] for c in scenario["checks"] if c["check"].startswith(starts))


def test_the_document_and_the_exit_code(smoke):
    done, document, scenarios = smoke
    assert list(scenarios) == [
        "nan",
        "kill-during-save",
        "config-mismatch",
        "rank-crash",
        "auto-recovery",
        "launcher-kill",
        "corrupt",
        "retention",
        "stale-steps",
        "two-writers",
        "disk-full",
    ]
    assert document["kind"] == "fault" and document["schema_version"] >= 1
    assert document["provenance"]["torch"] and document["provenance"]["end_utc"]
    assert document["reference"]["state_digests"]["model"]
    assert done.returncode == (0 if document["status"] == "ok" else 1), done.stderr
    assert "mtb fault smoke" in done.stdout and "retention" in done.stdout
    launches = [launch for scenario in scenarios.values() for launch in scenario["launches"]]
    assert all(launch["exit_code"] is not None for launch in launches)


def test_the_ddp_ranks_draw_different_dropout_masks(smoke):
    rng = smoke[1]["reference"]["state_digests"]["rng"]
    assert len(rng) == 2 and rng[0] != rng[1]


def test_nan_stops_every_rank_and_the_checkpoints(smoke):
    scenario = _passed(smoke[2], "nan")
    errors = _detail(scenario, "every rank exits")
    assert set(errors) == {"0", "1"} and len(set(errors.values())) == 1
    assert "non-finite loss" in errors["0"]
    (directory,) = scenario["evidence"]["directories"]
    assert directory["latest"] == "step_00000002" and directory["ready_steps"] == [2]
    assert directory["temporary"] == []
    assert _detail(scenario, "global step")["scheduler"]["step"] == 2


def test_kill_during_save_leaves_a_temporary_folder_and_resumes_before_it(smoke):
    scenario = _passed(smoke[2], "kill-during-save")
    killed, resumed = scenario["launches"]
    assert killed["exit_code"] not in (0, None)
    assert "rank 1 failed: Signal 9 (SIGKILL)" in killed["stderr"][-1]
    crashed, after = scenario["evidence"]["directories"]
    (temporary,) = crashed["temporary"]
    assert temporary.startswith("step_00000004.tmp-")
    assert f"{temporary}/metadata.json" not in crashed["listing"]
    assert f"{temporary}/READY" not in crashed["listing"]
    assert resumed["exit_code"] == 0
    assert after["ready_steps"] == [2, 4, 6] and temporary in after["temporary"]
    record = _detail(scenario, "resume picks")
    assert (record["step"], record["exact"], record["from_world_size"]) == (2, True, 2)


def test_config_mismatch_is_refused_with_the_diff(smoke):
    scenario = _passed(smoke[2], "config-mismatch")
    model, world = scenario["launches"]
    assert model["exit_code"] == 2
    assert "model.d_model: checkpoint 32, run 64" in model["stderr"][-1]
    assert "--nproc-per-node 1" in world["command"]
    if scenario["evidence"]["reshard_refusal"] is None:  # dcp reshards ddp and fsdp
        resumed = _detail(scenario, "another world size")
        assert resumed["exact"] is False
        assert "world_size: checkpoint 2, run 1" in resumed["allowed_changes"]
    else:
        assert world["exit_code"] == 2 and "world_size: checkpoint 2, run 1" in world["stderr"][-1]


def test_rank_crash_keeps_the_ready_tree_and_a_manual_restart_matches(smoke):
    scenario = _passed(smoke[2], "rank-crash")
    crashed, restarted = scenario["launches"]
    assert "rank 1 failed: Signal 9 (SIGKILL)" in crashed["stderr"][-1]
    tree = scenario["evidence"]["ready_tree"]
    assert tree["before"] == tree["after"]
    assert any(name.endswith(".distcp") for name in tree["before"]["files"])
    assert "--resume latest" in restarted["command"] and restarted["exit_code"] == 0
    assert _detail(scenario, "manual restart: final")["differing"] == []


def test_auto_recovery_restarts_and_matches_the_reference(smoke):
    scenario = _passed(smoke[2], "auto-recovery")
    (run,) = scenario["launches"]
    assert "--max-restarts 1" in run["command"] and "--resume" not in run["command"]
    assert run["exit_code"] == 0
    assert _detail(scenario, "the restarted workers")["step"] == 2
    digests = _detail(scenario, "recovered run")["digests"]
    assert digests == smoke[1]["reference"]["state_digests"]


def test_launcher_kill_leaves_no_worker_and_publishes_nothing_after(smoke):
    scenario = _passed(smoke[2], "launcher-kill")
    (run,) = scenario["launches"]
    assert run["exit_code"] == -9 and "--steps 100000" in run["command"]
    assert len(_detail(scenario, "the run trained with 2 workers")) == 2
    assert _detail(scenario, "every worker was gone")["survivors"] == []
    ckpt = scenario["evidence"]["ckpt"]
    assert "latest" in ckpt["after_kill"] and ckpt["later"] == ckpt["after_kill"]


def test_corrupt_checkpoints_fail_on_every_rank_and_latest_skips_them(smoke):
    scenario = _passed(smoke[2], "corrupt")
    shard, meta, latest = scenario["launches"]
    for launch in (shard, meta):
        assert launch["exit_code"] not in (0, None) and launch["seconds"] < 90
        ranks = {m.group(1) for m in map(RANK_LINE.match, launch["stderr"]) if m}
        assert ranks == {"0", "1"}
    assert any("bytes, expected" in line for line in shard["stderr"])
    assert any("corrupt metadata" in line for line in meta["stderr"])
    assert latest["exit_code"] == 0
    assert "step_00000002" in _detail(scenario, "--resume latest skips")["path"]


def test_retention_keeps_the_ready_checkpoint_and_clean_removes_the_abandoned(smoke):
    scenario = _passed(smoke[2], "retention")
    after_run, after_clean = scenario["evidence"]["after_run"], scenario["evidence"]["after_clean"]
    assert "step_00000002/READY" in after_run and "step_00000004/READY" in after_run
    temporary = [n for n in after_run if ".tmp-" in n and n.endswith("/") and n.count("/") == 1]
    assert len(temporary) == 2
    assert not any(".tmp-" in name for name in after_clean)
    assert "step_00000002/READY" in after_clean


def test_stale_steps_are_moved_aside_and_the_resume_finishes(smoke):
    scenario = _passed(smoke[2], "stale-steps")
    moved = _detail(scenario, "step 4 (stale)")
    assert [m["reason"] for m in moved] == ["stale", "incomplete"]
    resumed, _ = scenario["launches"]
    (line,) = [x for x in resumed["stderr"] if x.startswith("mtb: cleared the way")]
    assert f"{moved[0]['source']} -> {moved[0]['target']}" in line  # stored up to 400 characters
    after_run, after_clean = scenario["evidence"]["after_run"], scenario["evidence"]["after_clean"]
    assert f"{moved[0]['target']}/READY" in after_run  # the stale step is kept as it was
    assert not any(".stale-" in name for name in after_clean)
    removed = _detail(scenario, "`mtb checkpoint clean`")
    assert all(any(m["target"] in x and "removed" in x for x in removed) for m in moved)
    assert _detail(scenario, "resume past the stale steps")["differing"] == []


def test_two_writers_refuse_the_second_naming_the_first(smoke):
    scenario = _passed(smoke[2], "two-writers")
    first, second, cleaning = scenario["launches"]
    assert second["exit_code"] == 2 and "is in use by mtb run (pid " in second["stderr"][-1]
    assert cleaning["exit_code"] == 2 and "is in use by mtb run (pid " in cleaning["stderr"][-1]
    assert first["exit_code"] == 0


def test_disk_full_says_so_in_one_line(smoke):
    scenario = _passed(smoke[2], "disk-full")
    (full,) = scenario["launches"]
    assert full["exit_code"] == 1 and "No space left on device" in full["stderr"][-1]
    assert "--resume latest" in full["command"]
