"""The pinned checkout: HEAD must be --megatron-ref; refusals name both and change nothing."""

import pytest
from click.testing import CliRunner
from conftest import git

from mtb.errors import ConfigError
from mtb_megatron import checkout as pin


def test_head_at_the_ref_is_accepted_by_tag_branch_or_commit(checkout):
    for ref in ("v0.1-fake", checkout["head"], checkout["head"][:12], "HEAD"):
        found = pin.verify(str(checkout["path"]), ref)
        assert (found.commit, found.dirty, found.ref) == (checkout["head"], False, ref)


def test_ref_mismatch_is_refused_naming_both_commits_and_nothing_changes(cli, checkout, tmp_path):
    args = ["megatron", "run", "--megatron-dir", str(checkout["path"]), "--megatron-ref", "old"]
    result = CliRunner().invoke(cli, [*args, "--output", str(tmp_path / "r.json")])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert len(line.splitlines()) == 1 and line.startswith("Error: megatron_ref: HEAD of ")
    assert checkout["head"] in line and checkout["old"] in line and "--megatron-ref old" in line
    assert git(checkout["path"], "rev-parse", "HEAD") == checkout["head"]
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("ref", "message"),
    [("no-such-ref", "megatron_ref: 'no-such-ref' is not a commit"), ("", "give --megatron-ref")],
)
def test_unknown_or_missing_ref(checkout, ref, message):
    with pytest.raises(ConfigError, match=message):
        pin.verify(str(checkout["path"]), ref)


def test_directory_from_the_environment_or_refused(checkout, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGATRON_DIR", str(checkout["path"]))
    assert pin.verify("", "v0.1-fake").commit == checkout["head"]
    monkeypatch.delenv("MEGATRON_DIR")
    with pytest.raises(ConfigError, match="give --megatron-dir or set MEGATRON_DIR"):
        pin.verify("", "v0.1-fake")
    with pytest.raises(ConfigError, match="is not a git checkout"):
        pin.verify(str(tmp_path), "main")


@pytest.mark.parametrize(
    ("ref", "message"),
    [("old", r"has no pretrain_gpt\.py"),
     ("no-version", r"has no readable megatron/core/package_info\.py")],
)  # fmt: skip
def test_a_checkout_without_the_files_mtb_reads_is_refused(checkout, ref, message):
    git(checkout["path"], "checkout", "-q", ref)
    try:
        with pytest.raises(ConfigError, match=message):
            pin.verify(str(checkout["path"]), ref)
    finally:
        git(checkout["path"], "checkout", "-q", "v0.1-fake")
    assert pin.verify(str(checkout["path"]), "v0.1-fake").core_version == "0.16.1"
