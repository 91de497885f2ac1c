"""``mtb fault smoke``, its crash half: every scenario passes on 2 real ranks, and its evidence
shows why.

The smoke of nan, kill-during-save, config-mismatch, rank-crash and auto-recovery runs once
for the module; each test then reads one scenario's checks and evidence from its document.
The other half is test_fault_smoke_damage.py (tests/fault_smoke.py says why two halves).
"""

import pytest
from fault_smoke import CRASHES, DAMAGE, check_document, detail, passed, run_smoke

from mtb.fault.command import smoke_command
from mtb.fault.scenarios import SCENARIOS

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return run_smoke(tmp_path_factory, CRASHES)


def test_the_smoke_runs_every_scenario_by_default_and_the_halves_cover_them():
    assert list(SCENARIOS) == [
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
    (option,) = [p for p in smoke_command.params if p.name == "scenarios"]
    assert option.default == ",".join(SCENARIOS)
    assert list(SCENARIOS) == CRASHES + DAMAGE


def test_the_document_and_the_exit_code(smoke):
    check_document(smoke, CRASHES)


def test_the_ddp_ranks_draw_different_dropout_masks(smoke):
    rng = smoke[1]["reference"]["state_digests"]["rng"]
    assert len(rng) == 2 and rng[0] != rng[1]


def test_nan_stops_every_rank_and_the_checkpoints(smoke):
    scenario = passed(smoke[2], "nan")
    errors = detail(scenario, "every rank exits")
    assert set(errors) == {"0", "1"} and len(set(errors.values())) == 1
    assert "non-finite loss" in errors["0"]
    (directory,) = scenario["evidence"]["directories"]
    assert directory["latest"] == "step_00000002" and directory["ready_steps"] == [2]
    assert directory["temporary"] == []
    assert detail(scenario, "global step")["scheduler"]["step"] == 2


def test_kill_during_save_leaves_a_temporary_folder_and_resumes_before_it(smoke):
    scenario = passed(smoke[2], "kill-during-save")
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
    record = detail(scenario, "resume picks")
    assert (record["step"], record["exact"], record["from_world_size"]) == (2, True, 2)


def test_config_mismatch_is_refused_with_the_diff(smoke):
    scenario = passed(smoke[2], "config-mismatch")
    model, world = scenario["launches"]
    assert model["exit_code"] == 2
    assert "model.d_model: checkpoint 32, run 64" in model["stderr"][-1]
    assert "--nproc-per-node 1" in world["command"]
    if scenario["evidence"]["reshard_refusal"] is None:  # dcp reshards ddp and fsdp
        resumed = detail(scenario, "another world size")
        assert resumed["exact"] is False
        assert "world_size: checkpoint 2, run 1" in resumed["allowed_changes"]
    else:
        assert world["exit_code"] == 2 and "world_size: checkpoint 2, run 1" in world["stderr"][-1]


def test_rank_crash_keeps_the_ready_tree_and_a_manual_restart_matches(smoke):
    scenario = passed(smoke[2], "rank-crash")
    crashed, restarted = scenario["launches"]
    assert "rank 1 failed: Signal 9 (SIGKILL)" in crashed["stderr"][-1]
    tree = scenario["evidence"]["ready_tree"]
    assert tree["before"] == tree["after"]
    assert any(name.endswith(".distcp") for name in tree["before"]["files"])
    assert "--resume latest" in restarted["command"] and restarted["exit_code"] == 0
    assert detail(scenario, "manual restart: final")["differing"] == []


def test_auto_recovery_restarts_and_matches_the_reference(smoke):
    scenario = passed(smoke[2], "auto-recovery")
    (run,) = scenario["launches"]
    assert "--max-restarts 1" in run["command"] and "--resume" not in run["command"]
    assert run["exit_code"] == 0
    assert detail(scenario, "the restarted workers")["step"] == 2
    digests = detail(scenario, "recovered run")["digests"]
    assert digests == smoke[1]["reference"]["state_digests"]
