"""Writers of the two token-file layouts ``token_files`` reads, for ``mtb data prepare``.

Documents are appended as they are encoded, so the tokens stream to disk and
never sit in memory whole. Every file is written under a temporary name in
its own directory and renamed into place when complete: an interrupted
prepare leaves the old files (or none), never a prefix. The Megatron ``.idx``
is renamed after its ``.bin``, so a reader that finds the new index finds
the data it describes.
"""

import os
import tempfile
from pathlib import Path

import numpy as np

from mtb.token_files import HEADER, MEGATRON_DTYPES, MEGATRON_MAGIC, MEGATRON_VERSION

CODES = {np.dtype(kind): code for code, kind in MEGATRON_DTYPES.items()}
#: Megatron-LM's ``DType.optimal_dtype``: uint16 below 65500 ids, int32 above
MEGATRON_UINT16_BELOW = 65500


def megatron_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size < MEGATRON_UINT16_BELOW else np.int32)


def nanogpt_dtype(vocab_size: int) -> np.dtype:
    """uint16, as nanoGPT writes, when every id fits; uint32 (``--data-dtype uint32``) else."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def _temporary(target: Path):
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    return os.fdopen(handle, "wb"), Path(name)


def _finish(stream, temporary: Path, target: Path) -> None:
    stream.flush()
    os.fsync(stream.fileno())
    stream.close()
    os.chmod(temporary, 0o666 & ~_umask())
    os.replace(temporary, target)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class TokenWriter:
    """Appends documents of token ids to ``PREFIX.bin``; subclasses add the layout's index."""

    format = ""

    def __init__(self, prefix: Path, dtype: np.dtype):
        self.prefix, self.dtype = Path(prefix), np.dtype(dtype)
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self.lengths: list[int] = []
        self.stream, self.temporary = _temporary(self.data_path)

    @property
    def data_path(self) -> Path:
        return self.prefix.with_name(self.prefix.name + ".bin")

    @property
    def paths(self) -> list[Path]:
        return [self.data_path]

    def add(self, ids, end: int) -> None:
        """One document: its ``ids`` (a sequence or an array), then the end-of-text id."""
        document = np.empty(len(ids) + 1, dtype=self.dtype)
        document[:-1], document[-1] = ids, end
        # stream.write, not ndarray.tofile: tofile turns an exception raised by a
        # signal handler during its flush into a TypeError, losing the interruption
        self.stream.write(document.data)
        self.lengths.append(len(document))

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    def close(self) -> None:
        _finish(self.stream, self.temporary, self.data_path)

    def abort(self) -> None:
        self.stream.close()
        self.temporary.unlink(missing_ok=True)


class NanoGPTWriter(TokenWriter):
    """nanoGPT's headerless ``.bin``: the ids and nothing else."""

    format = "nanogpt"


class MegatronWriter(TokenWriter):
    """Megatron-LM's indexed dataset: ``PREFIX.bin`` and its ``PREFIX.idx``, a document
    per sequence (``IndexedDatasetBuilder.add_document`` with one sequence each)."""

    format = "megatron"

    @property
    def index_path(self) -> Path:
        return self.prefix.with_name(self.prefix.name + ".idx")

    @property
    def paths(self) -> list[Path]:
        return [self.data_path, self.index_path]

    def close(self) -> None:
        super().close()
        lengths = np.asarray(self.lengths, dtype=np.int32)
        offsets = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=offsets[1:])
        documents = np.arange(len(lengths) + 1, dtype=np.int64)
        stream, temporary = _temporary(self.index_path)
        code = CODES[self.dtype]
        stream.write(
            HEADER.pack(MEGATRON_MAGIC, MEGATRON_VERSION, code, len(lengths), len(documents))
        )
        for array in (lengths, offsets, documents):
            stream.write(array.tobytes())
        _finish(stream, temporary, self.index_path)


WRITERS = {"megatron": (MegatronWriter, megatron_dtype), "nanogpt": (NanoGPTWriter, nanogpt_dtype)}


def writer(format: str, prefix: Path, vocab_size: int) -> TokenWriter:
    kind, dtype = WRITERS[format]
    return kind(prefix, dtype(vocab_size))
