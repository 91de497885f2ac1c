"""``mtb data prepare``: text files to a token file mtb, nanoGPT and Megatron-LM train from.

Documents come from the inputs one of three ways (``--documents``): a file
each, a paragraph each (blank-line separated), or a JSON Lines record each
(the ``text`` key, as Megatron-LM's ``preprocess_data.py`` reads). They are
encoded in batches, each followed by the end-of-text id, and streamed to the
writer; a manifest ``PREFIX.json`` says how the file was made and what
vocabulary a model needs to train on it.
"""

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from mtb import token_writers, tokenizing
from mtb.errors import UsageError
from mtb.reporting import write_atomic

SPLITS = ("file", "paragraph", "jsonl")
BATCH_DOCUMENTS = 256  # documents encoded at a time: the batch tokenizers parallelise


@attrs.frozen
class Inputs:
    """The text files and how they hold documents; yields (document, bytes read)."""

    paths: tuple[Path, ...]
    split: str = "file"
    json_key: str = "text"

    @property
    def total_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.paths)

    def documents(self) -> Iterator[tuple[str, int]]:
        for path in self.paths:
            if self.split == "file":
                raw = path.read_bytes()
                yield _decode(path, raw, 1), len(raw)
            else:
                yield from self._records(path)

    def texts(self) -> Iterator[str]:
        return (text for text, _ in self.documents())

    def _records(self, path: Path) -> Iterator[tuple[str, int]]:
        paragraph: list[str] = []
        read = 0
        with path.open("rb") as stream:
            for number, raw in enumerate(stream, 1):
                line, read = _decode(path, raw, number), read + len(raw)
                if self.split == "jsonl":
                    if line.strip():
                        yield self._json_text(path, number, line), read
                        read = 0
                elif line.strip():
                    paragraph.append(line)
                elif paragraph:
                    yield "".join(paragraph), read
                    paragraph, read = [], 0
        if paragraph:
            yield "".join(paragraph), read

    def _json_text(self, path: Path, number: int, line: str) -> str:
        try:
            text = json.loads(line)[self.json_key]
        except (ValueError, KeyError, TypeError):
            raise UsageError(
                f"TEXT: {path}:{number}: not a JSON object with a {self.json_key!r} string"
            ) from None
        if not isinstance(text, str):
            raise UsageError(f"TEXT: {path}:{number}: {self.json_key!r} is not a string")
        return text


def _decode(path: Path, raw: bytes, line: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(f"TEXT: {path}:{line}: not UTF-8 text ({error.reason})") from None


def output_prefix(output: str | Path) -> Path:
    """``--output`` without a ``.bin``/``.idx`` suffix: the files are PREFIX.bin (and .idx)."""
    path = Path(output)
    return path.with_suffix("") if path.suffix in (".bin", ".idx") else path


def prepare(
    inputs: Inputs,
    output: Path,
    format: str,
    tokenizer: tokenizing.Tokenizer,
    advance: Callable[[int], None] = lambda read: None,
) -> dict:
    """Encode every document of ``inputs`` into ``format`` at ``output``; the manifest."""
    started = time.perf_counter()
    sink = token_writers.writer(format, output, tokenizer.vocab_size)
    try:
        for batch in _batches(inputs.documents()):
            encoded = tokenizer.encode_batch([text for text, _ in batch])
            for ids, (_, read) in zip(encoded, batch, strict=True):
                sink.add(ids, tokenizer.eot_id)
                advance(read)
        sink.close()
    except BaseException:
        sink.abort()
        raise
    manifest = _manifest(inputs, sink, tokenizer, time.perf_counter() - started)
    if isinstance(tokenizer, tokenizing.HuggingFaceTokenizer):
        saved = output.with_name(output.name + ".tokenizer.json")
        tokenizer.save(saved)
        manifest["tokenizer_file"] = saved.name
    write_atomic(output.with_name(output.name + ".json"), json.dumps(manifest, indent=2) + "\n")
    return manifest


def _batches(documents: Iterator[tuple[str, int]]) -> Iterator[list[tuple[str, int]]]:
    batch: list[tuple[str, int]] = []
    for document in documents:
        batch.append(document)
        if len(batch) == BATCH_DOCUMENTS:
            yield batch
            batch = []
    if batch:
        yield batch


def _manifest(inputs: Inputs, sink, tokenizer, seconds: float) -> dict:
    return {
        "format": sink.format,
        "files": [path.name for path in sink.paths],
        "dtype": sink.dtype.name,
        "tokenizer": tokenizer.name,
        "vocab_size": tokenizer.vocab_size,
        "eot_id": tokenizer.eot_id,
        "documents": len(sink.lengths),
        "tokens": sink.tokens,
        "inputs": [str(path) for path in inputs.paths],
        "split": inputs.split,
        "seconds": round(seconds, 3),
    }
