"""``mtb megatron run --data PREFIX``: the dataset is checked before launch, passed as
--data-path instead of --mock-data, and its digests recorded in the result."""

import hashlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

from mtb.data_prepare import Inputs, prepare
from mtb.tokenizing import ByteTokenizer

SMALL = ["--num-layers", "2", "--global-batch-size", "4", "--train-iters", "4"]
SMALL += ["--log-interval", "2", "--timeout", "60", "--seq-length", "16", "--vocab-size", "300"]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """A Megatron .bin/.idx of two documents, byte-tokenized by mtb data prepare."""
    folder = tmp_path_factory.mktemp("corpus")
    text = folder / "text.txt"
    text.write_text("the same tokens for mtb and for Megatron-LM\n" * 20)
    prepare(Inputs((text,)), folder / "corpus_text_document", "megatron", ByteTokenizer())
    return folder / "corpus_text_document"


def megatron(cli, checkout, tmp_path, *args):
    out = tmp_path / "result.json"
    argv = ["megatron", "run", "--megatron-dir", str(checkout["path"])]
    argv += ["--megatron-ref", "v0.1-fake", *SMALL, *args, "--output", str(out)]
    result = CliRunner().invoke(cli, argv)
    return result, json.loads(out.read_text()) if out.exists() else None


def test_a_dataset_is_trained_through_data_path_and_its_digests_recorded(
    cli, checkout, tmp_path, prefix, monkeypatch
):
    monkeypatch.setenv("FAKE_MEGATRON_MODE", "ok")
    result, doc = megatron(cli, checkout, tmp_path, "--data", str(prefix))
    assert result.exit_code == 0, result.output
    command = doc["runs"][0]["command"]
    assert "--mock-data" not in command
    at = command.index("--data-path")
    assert command[at : at + 4] == ["--data-path", str(prefix.resolve()), "--split", "100,0,0"]
    assert command[command.index("--data-cache-path") + 1] == str(
        (tmp_path / "result.logs" / "data-cache").resolve()
    )
    assert doc["config"]["data"] == str(prefix)
    data = doc["data"]
    assert (data["source"], data["prefix"], data["documents"]) == (
        "megatron",
        str(prefix.resolve()),
        1,
    )
    for suffix in ("idx", "bin"):
        raw = prefix.with_name(f"{prefix.name}.{suffix}").read_bytes()
        assert data["files"][suffix]["sha256"] == hashlib.sha256(raw).hexdigest()
        assert data["files"][suffix]["bytes"] == len(raw)
    assert data["tokens"] == len(np.memmap(f"{prefix}.bin", dtype=np.uint16, mode="r"))


def test_mock_data_stays_the_default(cli, checkout, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MEGATRON_MODE", "ok")
    result, doc = megatron(cli, checkout, tmp_path)
    assert result.exit_code == 0, result.output
    assert "--mock-data" in doc["runs"][0]["command"] and doc["data"] == {"source": "mock"}


def test_the_dry_run_names_the_dataset(cli, checkout, tmp_path, prefix):
    result, _ = megatron(cli, checkout, tmp_path, "--data", str(prefix), "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"# data: {prefix.resolve()} (" in result.output
    assert f"--data-path {prefix.resolve()} --split 100,0,0" in result.output


def bad_files(tmp_path, prefix):
    """Each bad --data and the words of its refusal."""
    nanogpt = tmp_path / "train.bin"
    np.arange(100, dtype=np.uint16).tofile(nanogpt)
    bad_magic = tmp_path / "magic"
    bad_magic.with_name("magic.idx").write_bytes(b"NOTMAGIC" * 8)
    bad_magic.with_name("magic.bin").write_bytes(b"")
    return [
        (str(tmp_path / "missing"), "not a Megatron indexed dataset"),
        (str(nanogpt), "not a Megatron indexed dataset"),
        (str(bad_magic), "not a Megatron index"),
    ]


def test_bad_datasets_are_one_line_before_any_launch(cli, checkout, tmp_path, prefix):
    for value, words in bad_files(tmp_path, prefix):
        result, doc = megatron(cli, checkout, tmp_path, "--data", value)
        assert result.exit_code == 2 and doc is None, result.output
        assert result.output.count("\n") == 1 and "data: " in result.output, result.output
        assert words in result.output


def test_ids_above_the_vocabulary_and_short_files_are_refused(cli, checkout, tmp_path, prefix):
    result, _ = megatron(cli, checkout, tmp_path, "--data", str(prefix), "--vocab-size", "100")
    assert result.exit_code == 2
    assert "is not in 0..99 (vocab_size=100)" in result.output
    result, _ = megatron(cli, checkout, tmp_path, "--data", str(prefix), "--seq-length", "4096")
    assert result.exit_code == 2 and "fewer than one sequence (4097)" in result.output
