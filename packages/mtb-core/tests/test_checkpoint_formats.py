"""Checkpoint formats: English and Chinese summaries, older formats upgraded, newer refused."""

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


@pytest.mark.slow
def test_an_older_format_is_upgraded_and_what_it_lacks_makes_the_resume_inexact(
    saved, tmp_path, invoke
):
    directory = copy_of(saved, tmp_path)
    step_dir = directory / "step_00000003"
    shutil.rmtree(step_dir / layout.RNG_DIR)
    rewrite(step_dir, lambda d: as_format_1(d, drop_rng=True))
    upgraded = check_intact(step_dir)
    assert upgraded["format_version"] == formats.FORMAT_VERSION and upgraded["upgraded_from"] == 1
    assert upgraded["lacks"] == ["RNG state of rank(s) 0", "a digest of metadata.json"]
    out = tmp_path / "resumed.json"
    args = [*BASE, "--steps", 5, "--checkpoint-dir", directory, "--resume", "latest"]
    result = invoke("run", *args, "--output", out)
    assert result.exit_code == 0, result.output
    assert (
        "format 1 upgraded to 3; not exact: the checkpoint lacks RNG state of rank(s) 0, "
        "a digest of metadata.json" in result.output
    )
    resumed = read_json(out)["checkpoint"]["resumed"]
    assert (resumed["step"], resumed["exact"], resumed["upgraded_from"]) == (3, False, 1)
    assert resumed["lacks"] == ["RNG state of rank(s) 0", "a digest of metadata.json"]


@pytest.mark.slow
@pytest.mark.parametrize("version", [1, 2])
def test_an_older_format_resumes_but_never_exactly_without_a_metadata_digest(
    saved, tmp_path, invoke, version
):
    """Before format 3, READY was empty: an edited metadata.json could not be told apart."""
    directory = copy_of(saved, tmp_path)
    step_dir = directory / "step_00000003"
    change = (lambda d: as_format_1(d, drop_rng=False)) if version == 1 else None
    rewrite(step_dir, change or (lambda d: d.update(format_version=2)))
    out = tmp_path / "resumed.json"
    args = [*BASE, "--steps", 4, "--checkpoint-dir", directory, "--resume", 3, "--output", out]
    assert invoke("run", *args).exit_code == 0
    resumed = read_json(out)["checkpoint"]["resumed"]
    assert (resumed["exact"], resumed["upgraded_from"]) == (False, version)
    assert resumed["lacks"] == ["a digest of metadata.json"]


@pytest.mark.slow
def test_a_format_1_train_state_without_scheduler_rebuilds_it_inexact(saved, tmp_path, invoke):
    directory = copy_of(saved, tmp_path)
    step_dir = directory / "step_00000003"
    saved_state = read_json(step_dir / layout.TRAIN_STATE)
    lr = saved_state.pop("scheduler")["last_lr"]
    (step_dir / layout.TRAIN_STATE).write_text(json.dumps(saved_state))

    def format_1(document):
        as_format_1(document, drop_rng=False)
        document["files"] = layout.file_digests(step_dir)

    rewrite(step_dir, format_1)
    out = tmp_path / "resumed.json"
    args = [*BASE, "--steps", 5, "--checkpoint-dir", directory, "--resume", "latest"]
    result = invoke("run", *args, "--output", out)
    assert result.exit_code == 0, result.output
    assert "lacks a digest of metadata.json, scheduler state (rebuilt from the config)" in (
        result.output
    )
    resumed = read_json(out)["checkpoint"]["resumed"]
    assert (resumed["step"], resumed["exact"], resumed["last_lr"]) == (3, False, lr)
    assert read_json(out)["checkpoint"]["end_step"] == 5


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
    assert "format_version 99 is newer than this mtb reads (up to 3)" in line


def test_what_no_format_is_gets_a_one_line_reason():
    assert formats.problem(1) is None and formats.problem(3) is None
    assert "is not a checkpoint format (1 to 3)" in formats.problem("2")
    assert "is not a checkpoint format" in formats.problem(0)
    assert "is newer than this mtb reads" in formats.problem(4)


@pytest.mark.parametrize("flags", [["--checkpoint-dir", "c"], ["--resume", "c/step_00000003"]])
def test_repeats_with_checkpointing_or_resume_are_refused(invoke, flags):
    result = invoke("run", *BASE, "--steps", 3, "--repeat", 2, *flags)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: training.repeat: 2 must be 1 when checkpointing or resuming "
        "(trials and resumable runs are different experiments)"
    )
