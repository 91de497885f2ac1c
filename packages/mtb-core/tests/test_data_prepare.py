"""mtb data prepare: text to the nanoGPT and Megatron layouts with each tokenizer kind,
read back as nanoGPT reads its file and as mtb's own readers do; bad input is one line,
and an interrupted prepare leaves the previous files as they were."""

import base64
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import as_from_a_terminal
from tokenizers import Tokenizer

from mtb.token_files import open_megatron, open_nanogpt

DOCUMENTS = ["The first document.\nIt has two lines.\n", "Second: ünïcode ✓\n", "third\n"]


@pytest.fixture
def texts(tmp_path):
    paths = []
    for number, text in enumerate(DOCUMENTS):
        path = tmp_path / f"doc{number}.txt"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def expected_bytes(documents, eot=0) -> list[int]:
    ids: list[int] = []
    for text in documents:
        ids += [*text.encode("utf-8"), eot]
    return ids


def manifest(prefix) -> dict:
    return json.loads(prefix.with_name(prefix.name + ".json").read_text())


def test_byte_megatron_holds_a_document_per_file(invoke, texts, tmp_path):
    prefix = tmp_path / "out" / "corpus"
    result = invoke("data", "prepare", *texts, "--output", prefix)
    assert result.exit_code == 0, result.output
    opened = open_megatron(prefix)
    assert opened.tokens.tolist() == expected_bytes(DOCUMENTS)
    assert opened.documents == len(DOCUMENTS)
    written = manifest(prefix)
    assert written["vocab_size"] == 256 and written["eot_id"] == 0
    assert written["documents"] == 3 and written["tokens"] == len(opened.tokens)
    assert f"mtb run --data {prefix} --vocab-size 256" in result.output


def test_nanogpt_file_reads_as_nanogpt_reads_it(invoke, texts, tmp_path):
    prefix = tmp_path / "train"
    result = invoke("data", "prepare", *texts, "--format", "nanogpt", "--output", f"{prefix}.bin")
    assert result.exit_code == 0, result.output
    data = np.memmap(tmp_path / "train.bin", dtype=np.uint16, mode="r")  # nanoGPT's get_batch
    assert data.tolist() == expected_bytes(DOCUMENTS)
    assert open_nanogpt(tmp_path / "train.bin").tokens.tolist() == data.tolist()
    assert not (tmp_path / "train.idx").exists()


def test_paragraphs_and_json_lines_split_documents(invoke, tmp_path):
    text = tmp_path / "book.txt"
    text.write_text("one\nstill one\n\n\ntwo\n\nthree\n")
    invoke("data", "prepare", text, "--documents", "paragraph", "--output", tmp_path / "p")
    assert open_megatron(tmp_path / "p").tokens.tolist() == expected_bytes(
        ["one\nstill one\n", "two\n", "three\n"]
    )
    records = tmp_path / "records.jsonl"
    records.write_text('{"text": "alpha"}\n\n{"text": "beta", "id": 2}\n')
    invoke("data", "prepare", records, "--documents", "jsonl", "--output", tmp_path / "j")
    assert open_megatron(tmp_path / "j").tokens.tolist() == expected_bytes(["alpha", "beta"])


def test_bpe_is_trained_saved_and_decodes_back(invoke, texts, tmp_path):
    prefix = tmp_path / "bpe"
    args = ("--tokenizer", "bpe", "--vocab-size", "300", "--output", prefix)
    assert invoke("data", "prepare", *texts, *args).exit_code == 0
    written = manifest(prefix)
    assert written["vocab_size"] == 300
    tokenizer = Tokenizer.from_file(str(tmp_path / written["tokenizer_file"]))
    ids = open_megatron(prefix).tokens.tolist()
    eot = written["eot_id"]
    assert ids.count(eot) == len(DOCUMENTS) and ids[-1] == eot
    decoded = tokenizer.decode(ids, skip_special_tokens=False).split("<|endoftext|>")
    assert decoded[:-1] == DOCUMENTS
    # the saved tokenizer.json, given back, encodes the same ids
    again = tmp_path / "again"
    saved = tmp_path / written["tokenizer_file"]
    invoke("data", "prepare", *texts, "--tokenizer", saved, "--output", again)
    assert open_megatron(again).tokens.tolist() == ids


def test_tiktoken_ranks_file(invoke, texts, tmp_path):
    """A local .tiktoken file of the 256 single bytes: ids are the bytes, end-of-text 256."""
    ranks = tmp_path / "bytes.tiktoken"
    lines = (f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256))
    ranks.write_text("\n".join(lines) + "\n")
    prefix = tmp_path / "tik"
    result = invoke(
        "data", "prepare", *texts, "--tokenizer", f"tiktoken:{ranks}", "--output", prefix
    )
    assert result.exit_code == 0, result.output
    assert open_megatron(prefix).tokens.tolist() == expected_bytes(DOCUMENTS, eot=256)
    assert manifest(prefix)["vocab_size"] == 257


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (b"text\x00with nul", (), "tokenizer: byte: the text holds a NUL byte"),
        (b"caf\xe9", (), "doc.txt:1: not UTF-8 text"),
        (b'{"text": 1}\n', ("--documents", "jsonl"), "doc.txt:1: 'text' is not a string"),
        (b"not json\n", ("--documents", "jsonl"), "doc.txt:1: not a JSON object"),
        (b"x", ("--tokenizer", "bpe"), "vocab_size: --tokenizer bpe needs --vocab-size"),
        (b"x", ("--tokenizer", "bpe", "--vocab-size", "9"), "vocab_size: bpe needs at least 257"),
        (b"x", ("--tokenizer", "missing.json"), "tokenizer: 'missing.json': give byte, bpe"),
    ],
)
def test_bad_input_is_one_line_and_keeps_the_old_files(invoke, tmp_path, content, args, message):
    text = tmp_path / "doc.txt"
    text.write_text("kept")
    prefix = tmp_path / "corpus"
    assert invoke("data", "prepare", text, "--output", prefix).exit_code == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    text.write_bytes(content)
    result = invoke("data", "prepare", text, *args, "--output", prefix)
    assert result.exit_code == 2
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != "doc.txt"} == {
        name: data for name, data in before.items() if name != "doc.txt"
    }


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_prepare_leaves_the_previous_files(tmp_path, signum):
    """A signal to a real prepare midway: the old .bin/.idx stay whole, no temporary is left."""
    small, big = tmp_path / "small.txt", tmp_path / "big.txt"
    small.write_text("old corpus\n")
    with big.open("w") as stream:
        for number in range(300_000):
            stream.write(f"paragraph {number} of a long input\n\n")
    prefix = tmp_path / "corpus"
    command = [sys.executable, "-m", "mtb", "data", "prepare", "--output", str(prefix)]
    subprocess.run([*command, str(small)], check=True, capture_output=True, timeout=30)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("corpus*")}
    stopped = subprocess.Popen(
        [*command, "--documents", "paragraph", str(big)],
        stderr=subprocess.PIPE,
        preexec_fn=as_from_a_terminal,  # a suite run in the background inherits SIGINT ignored
    )
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".corpus.bin.*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(stopped.pid, signum)
    status, stderr = stopped.wait(timeout=30), stopped.stderr.read().decode().strip()
    assert (status, stderr) == (128 + signum, f"Error: interrupted by {signum.name}")
    assert {p.name: p.read_bytes() for p in tmp_path.glob("corpus*")} == before
    assert not list(tmp_path.glob(".corpus*"))
