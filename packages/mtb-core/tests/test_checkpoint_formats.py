"""Checkpoint formats: English and Chinese summaries, older formats read but never resumed,
newer refused."""

import json
import shutil

import pytest
from conftest import FIXED_PEAK, read_json

from mtb.checkpoint import formats, layout
from mtb.checkpoint.metadata import check_intact

BASE = ["--preset", "tiny", "--warmup-steps", "1", *FIXED_PEAK]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A 3-step single run saved at step 3: its checkpoint folder and the result."""
    from click.testing import CliRunner

    from mtb.cli import make_cli
    from mtb.plugins import build_plugin_manager

    root = tmp_path_factory.mktemp("formats")
    cli = make_cli(build_plugin_manager(load_entry_points=False))
    args = [*BASE, "--steps", 3, "--save-every", 3, "--checkpoint-dir", root / "ckpt"]
    result = CliRunner().invoke(cli, ["run", *map(str, args), "--output", str(root / "r.json")])
    assert result.exit_code == 0, result.output
    return root / "ckpt"


def copy_of(saved, tmp_path):
    shutil.copytree(saved, tmp_path / "ckpt")
    return tmp_path / "ckpt"


def rewrite(step_dir, change) -> None:
    """Change metadata.json as the writer of its format would have written it.

    Before format 3, READY was empty; from 3 on it holds metadata.json's digest.
    """
    path = step_dir / layout.METADATA
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    sealed = isinstance(document["format_version"], int) and document["format_version"] >= 3
    (step_dir / layout.READY).write_text(layout.ready_text(step_dir) if sealed else "")


@pytest.mark.slow
def test_both_summaries_render_the_same_metadata(saved):
    step_dir = saved / "step_00000003"
    document = json.loads((step_dir / layout.METADATA).read_text())
    english = (step_dir / "metadata.md").read_text()
    chinese = (step_dir / "metadata_zh.md").read_text()
    assert english.startswith("# Checkpoint step_00000003") and "| Step | 3 |" in english
    assert chinese.startswith("# 检查点 step_00000003") and "| 步数 | 3 |" in chinese
    for value in (document["config_fingerprint"], document["strategy"], document["created_utc"]):
        assert str(value) in english and str(value) in chinese
    assert "--checkpoint-dir DIR --resume 3" in english and "--resume 3" in chinese
    assert "继续训练" in chinese and "Resume with" in english
    assert not set(layout.SUMMARIES) & set(document["files"])  # not payload: never digested
    assert check_intact(step_dir)["contents"]["rng_ranks"] == [0]


def as_format_1(document: dict, drop_rng: bool) -> None:
    """What format 1 wrote: no ``contents``; optionally a checkpoint without its RNG files."""
    document["format_version"] = 1
    del document["contents"]
    if drop_rng:
        document["files"] = {k: v for k, v in document["files"].items() if not k.startswith("rng/")}


def test_an_older_format_is_read_with_what_it_lacks_and_marked_unresumable(saved, tmp_path, invoke):
    directory = copy_of(saved, tmp_path)
    step_dir = directory / "step_00000003"
    shutil.rmtree(step_dir / layout.RNG_DIR)
    rewrite(step_dir, lambda d: as_format_1(d, drop_rng=True))
    upgraded = check_intact(step_dir)
    assert upgraded["format_version"] == formats.FORMAT_VERSION and upgraded["upgraded_from"] == 1
    assert upgraded["lacks"] == ["RNG state of rank(s) 0", "a digest of metadata.json"]
    assert upgraded["contents"]["qkv_order"] == "blocks"
    inspected = invoke("checkpoint", "inspect", step_dir)
    assert inspected.exit_code == 0, inspected.output
    report = json.loads(inspected.output)
    assert report["files_match"] and report["metadata"]["upgraded_from"] == 1
    assert "older q/k/v order" in report["resume_refusal"]
    listed = invoke("checkpoint", "list", directory, "--json")
    assert [row["state"] for row in json.loads(listed.output)["checkpoints"]] == ["READY"]
    verified = invoke("checkpoint", "verify", step_dir, "--output", tmp_path / "v.json")
    assert verified.exit_code == 0, verified.output


def test_a_current_checkpoint_may_be_resumed(saved):
    document = check_intact(saved / "step_00000003")
    assert document["format_version"] == 4 and document["upgraded_from"] is None
    assert formats.resume_refusal(document) is None


@pytest.mark.parametrize(("version", "spec"), [(1, "3"), (2, "latest"), (3, "latest"), (3, "3")])
def test_a_resume_of_an_older_format_is_refused_with_one_line(
    saved, tmp_path, invoke, version, spec
):
    """Its q/k/v rows would load without error and mean something else: never resumed,
    and ``latest`` does not fall back to an older checkpoint either."""
    directory = copy_of(saved, tmp_path)
    step_dir = directory / "step_00000003"
    shutil.copytree(step_dir, directory / "step_00000002")  # a current one to fall back to
    change = (lambda d: as_format_1(d, drop_rng=False)) if version == 1 else None
    rewrite(step_dir, change or (lambda d: d.update(format_version=version)))
    before = sorted(path.name for path in directory.iterdir())
    out = tmp_path / "resumed.json"
    args = [*BASE, "--steps", 5, "--checkpoint-dir", directory, "--resume", spec]
    result = invoke("run", *args, "--output", out)
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert line == (
        f"Error: {step_dir}: checkpoint format {version} holds its attention weights in the "
        "older q/k/v order (all q rows, then k, then v), which this mtb's model (format 4: "
        "q, k, v per head) would silently misread; resume it with the mtb release that wrote "
        "it (0.2.x)"
    )
    assert not out.exists() and sorted(p.name for p in directory.iterdir()) == before


def test_verify_rebuilds_the_scheduler_a_format_1_train_state_lacks(saved):
    from mtb import config as config_mod
    from mtb.checkpoint import state

    step_dir = saved / "step_00000003"
    training = config_mod.structure(check_intact(step_dir)["config"]).training
    train_state = state.load_train_state(step_dir)
    without = {k: v for k, v in train_state.items() if k != "scheduler"}
    assert state.with_scheduler(without, training) == (train_state, True)
    assert state.with_scheduler(train_state, training) == (train_state, False)


@pytest.mark.slow
def test_an_edited_metadata_step_is_refused_never_resumed_as_exact(saved, tmp_path, invoke):
    directory = copy_of(saved, tmp_path)
    path = directory / "step_00000003" / layout.METADATA
    path.write_text(path.read_text().replace('"step": 3', '"step": 4'))
    args = [*BASE, "--steps", 6, "--checkpoint-dir", directory]
    named = invoke("run", *args, "--resume", 3, "--output", tmp_path / "named.json")
    assert named.exit_code != 0
    assert "metadata.json does not match the SHA256 in READY (edited or damaged)" in named.output
    latest = invoke("run", *args, "--resume", "latest", "--output", tmp_path / "latest.json")
    assert latest.exit_code == 0, latest.output
    assert read_json(tmp_path / "latest.json")["checkpoint"]["resumed"] is None
    assert "does not match the SHA256 in READY" in latest.output


@pytest.mark.parametrize("spec", ["latest", "3"])
def test_a_newer_format_is_refused_never_skipped(saved, tmp_path, invoke, spec):
    directory = copy_of(saved, tmp_path)
    rewrite(directory / "step_00000003", lambda d: d.update(format_version=99))
    args = [*BASE, "--steps", 5, "--checkpoint-dir", directory, "--resume", spec]
    result = invoke("run", *args, "--output", tmp_path / "r.json")
    assert result.exit_code == 2
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert "format_version 99 is newer than this mtb reads (up to 4)" in line


def test_what_no_format_is_gets_a_one_line_reason():
    assert formats.problem(1) is None and formats.problem(4) is None
    assert "is not a checkpoint format (1 to 4)" in formats.problem("2")
    assert "is not a checkpoint format" in formats.problem(0)
    assert "is newer than this mtb reads" in formats.problem(5)


@pytest.mark.parametrize("flags", [["--checkpoint-dir", "c"], ["--resume", "c/step_00000003"]])
def test_repeats_with_checkpointing_or_resume_are_refused(invoke, flags):
    result = invoke("run", *BASE, "--steps", 3, "--repeat", 2, *flags)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: training.repeat: 2 must be 1 when checkpointing or resuming "
        "(trials and resumable runs are different experiments)"
    )
