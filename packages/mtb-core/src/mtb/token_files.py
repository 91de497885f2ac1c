"""Token files in the layouts the field trains from, opened as numpy memmaps.

Two layouts, both one flat array of token ids that ``TokenWindows`` samples:

- nanoGPT's ``train.bin``: headerless token ids (uint16 unless said otherwise),
  documents separated by an end-of-text token.
- Megatron-LM's indexed dataset, ``PREFIX.bin`` + ``PREFIX.idx``. The index
  starts with the 9-byte magic ``MMIDIDX\\x00\\x00``, an 8-byte version (1), a
  1-byte dtype code, the 8-byte sequence count N and document count D, then N
  int32 lengths, N int64 byte offsets, D int64 document indices and optionally
  N int8 modes; the ``.bin`` holds the sequences back to back.

Opening reads the index, never the tokens; ``check_tokens`` scans them once,
before launch, for an id the model's vocabulary cannot hold. Every refusal is
a one-line ``UsageError`` naming the field that gave the path (``data.source``
for ``mtb run``; another command passes its own).
"""

import struct
from pathlib import Path

import attrs
import numpy as np

from mtb.digests import file_record
from mtb.errors import UsageError

FIELD = "data.source"
MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_VERSION = 1
#: Megatron-LM's DType codes of the integer types a token id may have
MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}
#: ``data.dtype`` choices for a headerless nanoGPT file
NANOGPT_DTYPES = {"uint16": np.uint16, "int32": np.int32, "uint32": np.uint32}
HEADER = struct.Struct("<9sQBQQ")
SCAN_TOKENS = 1 << 24  # tokens checked at a time: the scan never holds the file


@attrs.frozen
class TokenFile:
    """One opened token file: its flat ids (a memmap) and where they came from."""

    format: str
    path: Path
    tokens: np.ndarray
    documents: int | None = None


def refuse(path: Path, why: str, field: str = FIELD) -> UsageError:
    return UsageError(f"{field}: {path}: {why}")


def megatron_file(prefix: Path, suffix: str) -> Path:
    """``PREFIX.idx`` or ``PREFIX.bin``, appended as Megatron-LM does: a prefix may hold dots."""
    return prefix.with_name(f"{prefix.name}.{suffix}")


def megatron_prefix(path: str | Path) -> Path | None:
    """The indexed dataset prefix ``path`` names (PREFIX, PREFIX.bin or PREFIX.idx), if any."""
    path = Path(path)
    prefix = path.with_suffix("") if path.suffix in (".bin", ".idx") else path
    return prefix if megatron_file(prefix, "idx").is_file() else None


def open_nanogpt(path: str | Path, dtype: str = "uint16") -> TokenFile:
    """A headerless file of ``dtype`` token ids."""
    path = Path(path)
    if not path.is_file():
        raise refuse(path, "no such file")
    kind = np.dtype(NANOGPT_DTYPES[dtype])
    size = path.stat().st_size
    if size == 0 or size % kind.itemsize:
        raise refuse(path, f"{size} bytes is not a whole number of {dtype} token ids")
    return TokenFile("nanogpt", path, np.memmap(path, dtype=kind, mode="r"))


def open_megatron(prefix: str | Path, field: str = FIELD) -> TokenFile:
    """``PREFIX.bin`` read through the layout ``PREFIX.idx`` declares, both checked."""
    prefix = Path(prefix)
    index, data = megatron_file(prefix, "idx"), megatron_file(prefix, "bin")
    with index.open("rb") as stream:
        raw = stream.read(HEADER.size)
    if len(raw) < HEADER.size or not raw.startswith(MEGATRON_MAGIC):
        raise refuse(
            index, f"not a Megatron index: it does not start with {MEGATRON_MAGIC!r}", field
        )
    _, version, code, sequences, documents = HEADER.unpack(raw)
    if version != MEGATRON_VERSION:
        raise refuse(index, f"index version {version}; this reader knows {MEGATRON_VERSION}", field)
    if code not in MEGATRON_DTYPES:
        raise refuse(
            index, f"dtype code {code}; token ids need one of {sorted(MEGATRON_DTYPES)}", field
        )
    lengths = _index_lengths(index, sequences, documents, field)
    kind = np.dtype(MEGATRON_DTYPES[code])
    expected = int(lengths.sum(dtype=np.int64)) * kind.itemsize
    if not data.is_file() or data.stat().st_size != expected:
        found = data.stat().st_size if data.is_file() else "no"
        raise refuse(data, f"{found} bytes where the index declares {expected}", field)
    tokens = np.memmap(data, dtype=kind, mode="r") if expected else np.zeros(0, kind)
    return TokenFile("megatron", prefix, tokens, documents=max(documents - 1, 0))


def _index_lengths(index: Path, sequences: int, documents: int, field: str) -> np.ndarray:
    """The N sequence lengths, after checking the index's size against N and D."""
    body = sequences * (4 + 8) + documents * 8
    size = index.stat().st_size
    if size not in (HEADER.size + body, HEADER.size + body + sequences):
        raise refuse(
            index, f"{size} bytes do not fit {sequences} sequences, {documents} documents", field
        )
    return np.memmap(index, dtype=np.int32, mode="r", offset=HEADER.size, shape=(sequences,))


def megatron_files(prefix: str | Path) -> dict:
    """Path, SHA256 and size of ``PREFIX.idx`` and ``PREFIX.bin``: which tokens a run read."""
    prefix = Path(prefix)
    return {suffix: file_record(megatron_file(prefix, suffix)) for suffix in ("idx", "bin")}


def check_tokens(
    opened: TokenFile,
    seq_len: int,
    vocab_size: int,
    field: str = FIELD,
    vocab_field: str = "model.vocab_size",
) -> None:
    """Refuse a file shorter than one sequence, or holding an id the vocabulary lacks;
    ``field`` and ``vocab_field`` name the settings the path and the vocabulary came from."""
    tokens, span = opened.tokens, seq_len + 1
    if len(tokens) < span:
        raise refuse(opened.path, f"{len(tokens)} tokens, fewer than one sequence ({span})", field)
    for start in range(0, len(tokens), SCAN_TOKENS):
        chunk = tokens[start : start + SCAN_TOKENS]
        low, high = int(chunk.min()), int(chunk.max())
        if low < 0 or high >= vocab_size:
            bad = high if high >= vocab_size else low
            allowed = f"0..{vocab_size - 1} ({vocab_field}={vocab_size})"
            raise refuse(opened.path, f"token id {bad} is not in {allowed}", field)
