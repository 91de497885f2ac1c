"""Checkpoint layout, selection, retention and compatibility, on hand-made directories."""

import json

import pytest

from mtb import config as config_mod
from mtb.checkpoint import layout, recovery, selection
from mtb.checkpoint import metadata as meta


def run_config(**training):
    flags = {"preset": "tiny", "training": {"steps": 8, **training}}
    return config_mod.resolve(flags=flags)


def make_checkpoint(root, step, config=None, world_size=2, ready=True):
    """A published step directory with one payload file, metadata.json and READY."""
    config = config or run_config()
    tmp = root / layout.temporary_name(step)
    (tmp / "payload").mkdir(parents=True)
    (tmp / "payload" / "shard.bin").write_bytes(bytes(range(256)) * (step + 1))
    train_state = {"step": step, "tokens_seen": step * 64, "created_utc": "2026-01-01T00:00:00"}
    document = meta.build(tmp, train_state, config, world_size, "dcp", {"torch": "x"})
    (tmp / layout.METADATA).write_text(json.dumps(document))
    final = layout.publish(tmp, step)
    if not ready:
        (final / layout.READY).unlink()
    layout.write_latest(root, step)
    return final


def test_metadata_records_what_the_issue_lists(tmp_path):
    document = meta.read(make_checkpoint(tmp_path, 4))
    for key in ("format_version", "step", "tokens_seen", "world_size", "strategy", "precision"):
        assert key in document
    assert document["config_fingerprint"] == config_mod.fingerprint(run_config())
    assert set(document["fingerprint_fields"]) == set(config_mod.FINGERPRINT_FIELDS)
    assert set(document["files"]) == {"payload/shard.bin"}
    assert len(document["files"]["payload/shard.bin"]["sha256"]) == 64


def test_latest_follows_the_pointer(tmp_path):
    make_checkpoint(tmp_path, 2)
    newest = make_checkpoint(tmp_path, 4)
    choice = selection.choose("latest", tmp_path)
    assert choice.path == newest and choice.reason == "latest names step_00000004"


def test_corrupt_pointer_falls_back_to_the_newest_intact_checkpoint(tmp_path):
    make_checkpoint(tmp_path, 2)
    newest = make_checkpoint(tmp_path, 4)
    (tmp_path / layout.LATEST).write_bytes(b"\xff\xfe garbage")
    choice = selection.choose("latest", tmp_path)
    assert choice.path == newest
    assert "no latest pointer" in choice.reason or "corrupt" in choice.reason


def test_pointer_to_a_checkpoint_without_ready_is_skipped(tmp_path):
    older = make_checkpoint(tmp_path, 2)
    make_checkpoint(tmp_path, 4, ready=False)
    choice = selection.choose("latest", tmp_path)
    assert choice.path == older
    assert "step_00000004" in choice.reason and "not READY" in choice.reason


def test_truncated_shard_is_skipped_by_latest_and_refused_when_named(tmp_path):
    older = make_checkpoint(tmp_path, 2)
    newest = make_checkpoint(tmp_path, 4)
    shard = newest / "payload" / "shard.bin"
    shard.write_bytes(shard.read_bytes()[:100])
    assert selection.choose("latest", tmp_path).path == older
    with pytest.raises(meta.CheckpointError, match=r"payload/shard.bin: 100 bytes, expected"):
        selection.choose(str(newest), tmp_path)
    with pytest.raises(meta.CheckpointError, match="files do not match"):
        selection.choose("4", tmp_path)


def test_corrupt_metadata_is_a_clear_error(tmp_path):
    step_dir = make_checkpoint(tmp_path, 2)
    (step_dir / layout.METADATA).write_text("{not json")
    with pytest.raises(meta.CheckpointError, match="corrupt metadata"):
        selection.choose(str(step_dir), tmp_path)
    choice = selection.choose("latest", tmp_path)
    assert choice.path is None and "starting at step 0" in choice.reason


def test_resume_latest_without_checkpoints_starts_from_zero(tmp_path):
    choice = selection.choose("latest", tmp_path)
    assert choice.path is None and "no latest pointer" in choice.reason


def test_an_existing_step_directory_is_never_overwritten(tmp_path):
    make_checkpoint(tmp_path, 2)
    tmp = tmp_path / layout.temporary_name(2)
    tmp.mkdir()
    with pytest.raises(FileExistsError, match="never overwritten"):
        layout.publish(tmp, 2)
    assert tmp.exists()


def test_pruning_keeps_the_newest_ready_and_ignores_temporary_directories(tmp_path):
    for step in (2, 4, 6):
        make_checkpoint(tmp_path, step)
    abandoned = [tmp_path / layout.temporary_name(s) for s in (8, 10)]
    for path in abandoned:
        path.mkdir()
    removed = layout.prune(tmp_path, keep_last=2)
    assert [p.name for p in removed] == ["step_00000002"]
    assert [e.step for e in layout.published(tmp_path)] == [4, 6]
    assert all(path.exists() for path in abandoned)
    assert [p.name for p in layout.prune(tmp_path, keep_last=1)] == ["step_00000004"]
    assert [e.step for e in layout.published(tmp_path)] == [6]
    assert layout.prune(tmp_path, keep_last=0) == []
    plan = recovery.plan_clean(tmp_path)
    assert sorted(p.name for p, _ in plan.doomed) == sorted(p.name for p in abandoned)
    recovery.apply_clean(tmp_path, plan)
    assert [e.step for e in layout.scan(tmp_path)] == [6]


def test_compatibility_diff_names_each_field(tmp_path):
    document = meta.read(make_checkpoint(tmp_path, 2))
    other = config_mod.resolve(flags={"preset": "tiny", "model": {"d_model": 64}})
    refusals, _ = meta.differences(document, other, 4, reshard_refusal="cannot reshard")
    assert "model.d_model: checkpoint 32, run 64" in refusals
    assert "world_size: checkpoint 2, run 4 (cannot reshard)" in refusals
    with pytest.raises(meta.CheckpointError, match=r"does not match this run: model.d_model"):
        meta.check_compatible(tmp_path / "step_00000002", document, other, 2, None)


def test_steps_cadence_and_lr_may_differ(tmp_path):
    document = meta.read(make_checkpoint(tmp_path, 2))
    changed = config_mod.resolve(
        flags={"preset": "tiny", "training": {"steps": 20, "lr": 1e-3}, "output": "elsewhere.json"}
    )
    refusals, allowed = meta.differences(document, changed, 4, reshard_refusal=None)
    assert refusals == []
    assert allowed == [
        "world_size: checkpoint 2, run 4",
        "training.lr: checkpoint 0.0003, run 0.001",
    ]


def layout_config(strategy="nd", **parallel):
    flags = {"preset": "tiny", "strategy": strategy, "parallel": parallel}
    return config_mod.resolve(flags={**flags, "launch": {"nproc_per_node": 4}})


def test_layouts_and_strategies_change_where_dcp_reshards_but_pipeline_stages_do_not(tmp_path):
    saved = layout_config(dp_shard=2, tp=2)
    document = meta.read(make_checkpoint(tmp_path, 2, saved, world_size=4))
    assert document["layout"]["label"] == "dp2·tp2"
    refusals, allowed = meta.differences(document, layout_config("fsdp"), 4, None)
    assert refusals == []
    assert "layout: checkpoint dp2·tp2, run dp4" in allowed
    assert "strategy: checkpoint 'nd', run 'fsdp'" in allowed
    refusals, _ = meta.differences(document, layout_config("zero3"), 4, "partitions")
    assert "strategy: checkpoint 'nd', run 'zero3'" in refusals
    with pytest.raises(meta.CheckpointError) as refused:
        meta.check_compatible(tmp_path / "step_00000002", document, layout_config(pp=2), 4, None)
    assert str(refused.value).splitlines() == [
        "checkpoint step_00000002 does not match this run: layout: checkpoint dp2·tp2, "
        "run dp2·pp2 (pipeline stages 1 vs 2: stage boundaries moved)"
    ]


def test_more_stages_per_pipeline_rank_are_refused_at_the_same_pp(tmp_path):
    def pipelined(**parallel):
        flags = {"preset": "tiny", "strategy": "nd", "launch": {"nproc_per_node": 2}}
        model = {"model": {"n_layers": 4}, "data": {"micro_batch_size": 4}}
        return config_mod.resolve(flags={**flags, **model, "parallel": {"pp": 2, **parallel}})

    saved = pipelined()
    document = meta.read(make_checkpoint(tmp_path, 2, saved, world_size=2))
    looped = pipelined(pp_schedule="interleaved-1f1b", pp_stages_per_rank=2)
    refusals, _ = meta.differences(document, looped, 2, None)
    assert refusals == [
        "layout: checkpoint pp2, run pp2 (pipeline stages 2 vs 4: stage boundaries moved)"
    ]


def damaged_layout(root):
    """READY 2 and 4, latest lagging at 2, a READY 6 with a cut shard, an unfinished 8."""
    for step in (2, 4, 6):
        make_checkpoint(root, step)
    shard = root / "step_00000006" / "payload" / "shard.bin"
    shard.write_bytes(shard.read_bytes()[:10])
    make_checkpoint(root, 8, ready=False)
    layout.write_latest(root, 2)


def test_resume_point_clears_the_way_moving_later_steps_aside(tmp_path):
    damaged_layout(tmp_path)
    kept = {p.name: sorted(f.name for f in p.rglob("*")) for p in tmp_path.glob("step_*")}
    cleared = recovery.clear_way(tmp_path, 2, tmp_path / "step_00000002")
    moved = {m["source"]: m for m in cleared["moved_aside"]}
    assert {name: m["reason"] for name, m in moved.items()} == {
        "step_00000004": "stale",
        "step_00000006": "damaged",
        "step_00000008": "incomplete",
    }
    assert "payload/shard.bin: 10 bytes, expected" in moved["step_00000006"]["why"]
    for name, m in moved.items():
        assert layout.ASIDE_PATTERN.match(m["target"]) and m["target"].startswith(name + ".")
        assert sorted(f.name for f in (tmp_path / m["target"]).rglob("*")) == kept[name]
    assert [e.step for e in layout.published(tmp_path)] == [2]
    assert [e.aside for e in layout.scan(tmp_path) if e.aside] == ["stale", "damaged", "incomplete"]
    assert cleared["latest"] is None and layout.read_latest(tmp_path) == "step_00000002"
    line = recovery.announcement(tmp_path, cleared)
    assert line.count("\n") == 0 and "step_00000004 -> step_00000004.stale-" in line
    assert f"mtb checkpoint clean {tmp_path}" in line


def test_a_resume_point_elsewhere_leaves_latest_and_without_one_it_goes(tmp_path):
    damaged_layout(tmp_path)
    cleared = recovery.clear_way(tmp_path, 4, tmp_path / "other" / "step_00000004")
    assert cleared["latest"] is None and layout.read_latest(tmp_path) == "step_00000002"
    cleared = recovery.clear_way(tmp_path, 0, None)
    assert cleared["latest"] == "latest step_00000002 -> removed"
    assert not layout.in_place(tmp_path) and not (tmp_path / layout.LATEST).exists()


def test_clean_removes_what_nothing_resumes_and_repairs_latest(tmp_path):
    damaged_layout(tmp_path)
    layout.move_aside(make_checkpoint(tmp_path, 10), "stale")
    layout.write_latest(tmp_path, 10)  # names a directory that is gone
    (tmp_path / ".latest.abc123.tmp").write_text("step_")
    plan = recovery.plan_clean(tmp_path)
    reasons = {path.name: why for path, why in plan.doomed}
    assert reasons["step_00000006"].startswith("damaged: files do not match")
    assert reasons["step_00000008"] == "incomplete: not READY"
    assert reasons[".latest.abc123.tmp"] == "leftover temporary pointer"
    assert any(why == "moved aside: stale" for why in reasons.values())
    assert plan.latest == "latest step_00000010 -> step_00000004"
    recovery.apply_clean(tmp_path, plan)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "latest",
        "step_00000002",
        "step_00000004",
    ]
    assert layout.read_latest(tmp_path) == "step_00000004"
    assert recovery.plan_clean(tmp_path) == recovery.CleanPlan([], None, 4)


def test_ready_holds_the_metadata_digest_and_an_edit_is_refused(tmp_path):
    older = make_checkpoint(tmp_path, 2)
    newest = make_checkpoint(tmp_path, 4)
    digest = layout.sha256_file(newest / layout.METADATA)
    assert (newest / layout.READY).read_text() == f"{digest}  metadata.json\n"
    path = newest / layout.METADATA
    path.write_text(path.read_text().replace('"step": 4', '"step": 8'))
    with pytest.raises(meta.CheckpointError, match="does not match the SHA256 in READY"):
        selection.choose("4", tmp_path)
    choice = selection.choose("latest", tmp_path)
    assert choice.path == older and "metadata.json does not match the SHA256" in choice.reason


def test_a_current_format_without_the_digest_is_refused(tmp_path):
    step_dir = make_checkpoint(tmp_path, 2)
    (step_dir / layout.READY).write_text("")
    with pytest.raises(meta.CheckpointError, match=r"READY holds no digest of metadata\.json"):
        meta.check_intact(step_dir)


def test_inspect_names_an_edited_metadata(invoke, tmp_path):
    step_dir = make_checkpoint(tmp_path, 2)
    path = step_dir / layout.METADATA
    path.write_text(path.read_text().replace('"step": 2', '"step": 3'))
    report = json.loads(invoke("checkpoint", "inspect", step_dir).output)
    assert report["files_match"] is False
    assert report["problems"] == [
        "metadata.json does not match the SHA256 in READY (edited or damaged)"
    ]


def test_a_failed_write_becomes_one_line_naming_the_cause(tmp_path):
    import errno

    from mtb.checkpoint import write_errors

    class PerRank(BaseException):  # what DCP raises: a BaseException holding each rank's error
        def __init__(self, failures):
            self.failures = failures

    full = PerRank({0: (OSError(errno.ENOSPC, "No space left on device"), None),
                    1: (RuntimeError("unexpected pos 704 vs 598"), None)})  # fmt: skip
    line = write_errors.describe(full, tmp_path, "step_00000004")
    assert line.startswith(
        f"checkpoint.dir: No space left on device while saving step_00000004 into {tmp_path} ("
    )
    assert " free of " in line
    capped = RuntimeError("save failed")
    capped.__cause__ = OSError(errno.EFBIG, "File too large")
    assert "(a file reached the file-size limit)" in write_errors.describe(capped, tmp_path, "s")
    other = PerRank({1: (ValueError("bad shape"), None)})
    assert write_errors.describe(other, tmp_path, "s") == (
        "checkpoint save of s failed on rank(s) [1]: ValueError: bad shape"
    )
    # a short write with plenty of room left is not called a full disk
    assert write_errors.describe(RuntimeError("unexpected pos 1 vs 2"), tmp_path, "s") is None
    with (
        pytest.raises(write_errors.SaveFailed, match="No space left on device"),
        write_errors.one_line_failures(tmp_path, "step_00000004"),
    ):
        raise full


def test_a_resume_that_is_not_exact_says_what_changed(capsys):
    """tp 2 resumed as fsdp on the same 2 ranks changed the layout, not the world size."""
    from mtb.checkpoint.lifecycle import Resumed, layout_change
    from mtb.checkpoint.session import announce

    assert layout_change(2, "dp2", 2, "dp2") is None
    assert layout_change(4, "dp4", 2, "dp2") == "world size changed (4 -> 2), data order differs"
    changed = layout_change(2, "tp2", 2, "dp2")
    assert changed.startswith("layout changed (tp2 -> dp2) on the same 2 ranks: the saved")
    resumed = Resumed("ckpt/step-3", 3, 384, 0.1, "newest", False, 2, [], 0.1, changed=changed)
    announce(resumed)
    line = capsys.readouterr().err
    assert f"not exact: {changed}" in line and "world size changed" not in line
