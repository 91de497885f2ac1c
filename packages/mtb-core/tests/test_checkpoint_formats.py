"""Checkpoint formats: English and Chinese summaries, older formats upgraded, newer refused."""

import json
import shutil

import pytest
from conftest import read_json

from mtb.checkpoint import formats, layout
from mtb.checkpoint.metadata import check_intact

BASE = ["--preset", "tiny", "--warmup-steps", "1"]
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
    path = step_dir / layout.METADATA
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))


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


def test_an_older_format_is_upgraded_and_what_it_lacks_makes_the_resume_inexact(
    saved, tmp_path, invoke
):
    directory = copy_of(saved, tmp_path)
    step_dir = directory / "step_00000003"
    shutil.rmtree(step_dir / layout.RNG_DIR)
    rewrite(step_dir, lambda d: as_format_1(d, drop_rng=True))
    upgraded = check_intact(step_dir)
    assert upgraded["format_version"] == formats.FORMAT_VERSION and upgraded["upgraded_from"] == 1
    assert upgraded["lacks"] == ["RNG state of rank(s) 0"]
    out = tmp_path / "resumed.json"
    args = [*BASE, "--steps", 5, "--checkpoint-dir", directory, "--resume", "latest"]
    result = invoke("run", *args, "--output", out)
    assert result.exit_code == 0, result.output
    assert "format 1 upgraded to 2; not exact: the checkpoint lacks RNG state of rank(s) 0" in (
        result.output
    )
    resumed = read_json(out)["checkpoint"]["resumed"]
    assert (resumed["step"], resumed["exact"], resumed["upgraded_from"]) == (3, False, 1)
    assert resumed["lacks"] == ["RNG state of rank(s) 0"]


def test_an_older_format_with_everything_resumes_exactly(saved, tmp_path, invoke):
    directory = copy_of(saved, tmp_path)
    rewrite(directory / "step_00000003", lambda d: as_format_1(d, drop_rng=False))
    out = tmp_path / "resumed.json"
    args = [*BASE, "--steps", 4, "--checkpoint-dir", directory, "--resume", 3, "--output", out]
    assert invoke("run", *args).exit_code == 0
    resumed = read_json(out)["checkpoint"]["resumed"]
    assert (resumed["exact"], resumed["upgraded_from"], resumed["lacks"]) == (True, 1, [])


@pytest.mark.parametrize("spec", ["latest", "3"])
def test_a_newer_format_is_refused_never_skipped(saved, tmp_path, invoke, spec):
    directory = copy_of(saved, tmp_path)
    rewrite(directory / "step_00000003", lambda d: d.update(format_version=99))
    args = [*BASE, "--steps", 5, "--checkpoint-dir", directory, "--resume", spec]
    result = invoke("run", *args, "--output", tmp_path / "r.json")
    assert result.exit_code == 2
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert "format_version 99 is newer than this mtb reads (up to 2)" in line


def test_what_no_format_is_gets_a_one_line_reason():
    assert formats.problem(1) is None and formats.problem(2) is None
    assert "is not a checkpoint format (1 to 2)" in formats.problem("2")
    assert "is not a checkpoint format" in formats.problem(0)
    assert "is newer than this mtb reads" in formats.problem(3)


@pytest.mark.parametrize("flags", [["--checkpoint-dir", "c"], ["--resume", "c/step_00000003"]])
def test_repeats_with_checkpointing_or_resume_are_refused(invoke, flags):
    result = invoke("run", *BASE, "--steps", 3, "--repeat", 2, *flags)
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: training.repeat: 2 must be 1 when checkpointing or resuming "
        "(trials and resumable runs are different experiments)"
    )
