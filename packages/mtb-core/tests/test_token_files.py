"""Token files: nanoGPT's and Megatron-LM's layouts written with numpy as the peers write
them, read by mtb, sampled deterministically, refused in one line when wrong."""

import json
import struct

import numpy as np
import pytest
import torch
from conftest import TINY

from mtb.data import TokenWindows
from mtb.errors import UsageError
from mtb.token_files import check_tokens, open_megatron, open_nanogpt

SEQ = 8


def nanogpt_file(path, tokens, dtype=np.uint16):
    """nanoGPT's prepare.py layout: the ids, headerless, ``arr.tofile``."""
    np.asarray(tokens, dtype=dtype).tofile(path)
    return path


def megatron_files(prefix, documents, code=8, dtype=np.uint16, version=1, modes=False):
    """Megatron-LM's indexed dataset: PREFIX.bin back to back, PREFIX.idx as its builder
    writes it (one sequence per document; document indices 0..N)."""
    lengths = np.array([len(d) for d in documents], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) * 2
    doc_index = np.arange(len(documents) + 1, dtype=np.int64)
    np.concatenate([np.asarray(d, dtype=dtype) for d in documents]).tofile(f"{prefix}.bin")
    with open(f"{prefix}.idx", "wb") as index:
        index.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", version) + struct.pack("<B", code))
        index.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(doc_index)))
        index.write(lengths.tobytes() + pointers.tobytes() + doc_index.tobytes())
        if modes:
            index.write(np.zeros(len(lengths), dtype=np.int8).tobytes())
    return prefix


def windows(tokens, micro_batch_size, dp_rank=0, dp_world_size=1):
    return TokenWindows(256, SEQ, micro_batch_size, 7, dp_rank, dp_world_size, tokens=tokens)


def global_rows(tokens, ranks, micro_batch, micro_steps, step=3) -> list:
    """Every sequence of one step's global batch, in global sample order."""
    rows = []
    for micro in range(micro_steps):
        for rank in range(ranks):
            batch = windows(tokens, micro_batch, rank, ranks).batch(step, micro)
            rows += torch.cat([batch.inputs, batch.targets[:, -1:]], 1).tolist()
    return rows


def test_windows_are_slices_of_the_file_and_the_same_however_the_batch_is_split(tmp_path):
    tokens = open_nanogpt(nanogpt_file(tmp_path / "train.bin", np.arange(200) % 256)).tokens
    whole = global_rows(tokens, ranks=1, micro_batch=4, micro_steps=1)
    assert whole == global_rows(tokens, ranks=2, micro_batch=2, micro_steps=1)
    assert whole == global_rows(tokens, ranks=2, micro_batch=1, micro_steps=2)
    for row in whole:  # arange: a window is the run of ids from its first one
        assert row == list(range(row[0], row[0] + SEQ + 1))
    assert len({row[0] for row in whole}) > 1
    batch = windows(tokens, 4).batch(3, 0)
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])


def test_a_step_is_the_same_whatever_came_before_and_other_steps_differ(tmp_path):
    tokens = open_nanogpt(nanogpt_file(tmp_path / "t.bin", np.arange(500) % 256)).tokens
    first, other = windows(tokens, 2), windows(tokens, 2)
    for step in range(5):
        other.batch(step, 0)
    assert torch.equal(first.batch(5, 0).inputs, other.batch(5, 0).inputs)
    assert not torch.equal(first.batch(5, 0).inputs, first.batch(6, 0).inputs)


def test_a_nanogpt_file_of_another_dtype_reads_with_its_flag(tmp_path):
    path = nanogpt_file(tmp_path / "wide.bin", [70000, 1, 2], dtype=np.uint32)
    assert open_nanogpt(path, "uint32").tokens.tolist() == [70000, 1, 2]
    assert open_nanogpt(path, "uint16").tokens.tolist() == [4464, 1, 1, 0, 2, 0]


@pytest.mark.parametrize("modes", [False, True])
def test_a_megatron_dataset_reads_as_its_documents_back_to_back(tmp_path, modes):
    documents = [[5, 6, 7], [1, 2], [9] * 20]
    prefix = megatron_files(tmp_path / "corpus_text_document", documents, modes=modes)
    opened = open_megatron(prefix)
    assert opened.tokens.tolist() == [5, 6, 7, 1, 2, *[9] * 20]
    assert opened.documents == 3 and opened.tokens.dtype == np.uint16


def refusal(call) -> str:
    with pytest.raises(UsageError) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("data.source: ")
    return message


def test_bad_megatron_files_are_one_line_each(tmp_path):
    docs = [[1, 2, 3]]
    bad_magic = tmp_path / "m"
    megatron_files(bad_magic, docs)
    data = bytearray((tmp_path / "m.idx").read_bytes())
    data[:7] = b"NOTIDX!"
    (tmp_path / "m.idx").write_bytes(bytes(data))
    assert "not a Megatron index" in refusal(lambda: open_megatron(bad_magic))
    version = megatron_files(tmp_path / "v", docs, version=2)
    assert "index version 2; this reader knows 1" in refusal(lambda: open_megatron(version))
    floats = megatron_files(tmp_path / "f", docs, code=6)
    assert "dtype code 6" in refusal(lambda: open_megatron(floats))
    short = megatron_files(tmp_path / "s", docs)
    (tmp_path / "s.bin").write_bytes(b"\x01\x00")
    assert "2 bytes where the index declares 6" in refusal(lambda: open_megatron(short))
    cut = megatron_files(tmp_path / "c", docs)
    (tmp_path / "c.idx").write_bytes((tmp_path / "c.idx").read_bytes()[:-3])
    assert "do not fit 1 sequences, 2 documents" in refusal(lambda: open_megatron(cut))


def test_bad_nanogpt_files_and_tokens_the_model_cannot_take(tmp_path):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x02\x03")
    assert "3 bytes is not a whole number of uint16" in refusal(lambda: open_nanogpt(odd))
    assert "no such file" in refusal(lambda: open_nanogpt(tmp_path / "none.bin"))
    short = open_nanogpt(nanogpt_file(tmp_path / "short.bin", range(SEQ)))
    assert f"{SEQ} tokens, fewer than one sequence" in refusal(
        lambda: check_tokens(short, SEQ, 256)
    )
    big = open_nanogpt(nanogpt_file(tmp_path / "big.bin", [*range(50), 300]))
    message = refusal(lambda: check_tokens(big, SEQ, 256))
    assert message.endswith("token id 300 is not in 0..255 (model.vocab_size=256)")
    check_tokens(big, SEQ, 301)


def python_source_bytes() -> np.ndarray:
    """Text Python itself ships, as byte ids (the tiny preset's vocabulary is 256)."""
    return np.frombuffer(open(json.__file__, "rb").read(), dtype=np.uint8)


@pytest.mark.slow
def test_a_run_trains_on_a_token_file_and_records_its_source(invoke, tmp_path):
    path = nanogpt_file(tmp_path / "train.bin", python_source_bytes())
    out = tmp_path / "r.json"
    done = invoke("run", *TINY, "--data", path, "--output", out)
    assert done.exit_code == 0, done.output
    doc = json.loads(out.read_text())
    assert doc["status"] == "ok" and doc["config"]["data"]["source"] == str(path)
    assert doc["components"]["data_source"]["name"] == "nanogpt"
    assert all(step["loss"] > 0 for step in doc["trials"][0]["steps"])


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "missing.bin",
            "not a token file (no such file); data sources: synthetic, megatron, nanogpt",
        ),
        ("big.bin", "token id 300 is not in 0..255 (model.vocab_size=256)"),
    ],
)
def test_a_run_on_a_bad_source_exits_2_in_one_line_before_launch(
    invoke, tmp_path, monkeypatch, source, expected
):
    monkeypatch.chdir(tmp_path)
    nanogpt_file(tmp_path / "big.bin", [*range(100), 300])
    done = invoke("run", *TINY, "--data", source, "--output", tmp_path / "r.json")
    assert done.exit_code == 2
    last = done.output.strip().splitlines()[-1]
    assert last.startswith(f"Error: data.source: {source}") and last.endswith(expected)
