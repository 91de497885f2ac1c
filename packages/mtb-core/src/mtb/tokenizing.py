"""The tokenizers ``mtb data prepare`` encodes text with, behind one small interface.

Three kinds, chosen by ``--tokenizer``:

- ``byte``: a token per UTF-8 byte, vocabulary 256, end-of-text id 0 (NUL, a
  byte no text file holds). Needs nothing installed; fits the ``tiny`` preset.
- Hugging Face ``tokenizers``: a ``tokenizer.json`` the user has, or ``bpe``,
  a byte-level BPE trained on the input text to ``--vocab-size`` ids.
- ``tiktoken``: ``tiktoken:NAME`` for an encoding tiktoken has cached locally
  (it downloads on first use otherwise), or ``tiktoken:FILE.tiktoken``, a
  local ranks file read with GPT-2's split pattern.

Every kind ends a document with its end-of-text id, as nanoGPT's
``prepare.py`` and Megatron-LM's ``preprocess_data.py --append-eod`` do.
"""

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import attrs
import numpy as np

from mtb.errors import UsageError

FIELD = "tokenizer"
END_OF_TEXT = "<|endoftext|>"
INSTALL = "pip install 'mtb-core[data]'"


class Tokenizer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def eot_id(self) -> int: ...

    def encode_batch(self, texts: list[str]) -> list:
        """The ids of each text (lists or arrays), without the end-of-text id."""


def refuse(message: str) -> UsageError:
    return UsageError(f"{FIELD}: {message}")


@attrs.frozen
class ByteTokenizer:
    """UTF-8 bytes as ids; NUL is the end-of-text id, so text holding one is refused."""

    name: str = "byte"
    vocab_size: int = 256
    eot_id: int = 0

    def encode_batch(self, texts: list[str]) -> list:
        encoded = [text.encode("utf-8") for text in texts]
        if any(0 in ids for ids in encoded):
            raise refuse("byte: the text holds a NUL byte, the byte tokenizer's end-of-text id")
        return [np.frombuffer(ids, dtype=np.uint8) for ids in encoded]


@attrs.frozen
class HuggingFaceTokenizer:
    """A ``tokenizers.Tokenizer``; ``END_OF_TEXT`` must be one of its tokens."""

    name: str
    tokenizer: Any
    vocab_size: int
    eot_id: int

    @classmethod
    def wrap(cls, name: str, tokenizer) -> "HuggingFaceTokenizer":
        eot = tokenizer.token_to_id(END_OF_TEXT)
        if eot is None:
            raise refuse(f"{name}: has no {END_OF_TEXT} token to end documents with")
        return cls(name, tokenizer, tokenizer.get_vocab_size(), eot)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def save(self, path: Path) -> None:
        self.tokenizer.save(str(path))


@attrs.frozen
class TiktokenTokenizer:
    """A ``tiktoken.Encoding``, whose end-of-text token is its ``eot_token``."""

    name: str
    encoding: Any

    @property
    def vocab_size(self) -> int:
        return self.encoding.n_vocab

    @property
    def eot_id(self) -> int:
        return self.encoding.eot_token

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return self.encoding.encode_ordinary_batch(texts)


def _import(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise refuse(f"{module} is not installed; {INSTALL}") from None


def from_file(path: Path) -> HuggingFaceTokenizer:
    tokenizers = _import("tokenizers")
    try:
        loaded = tokenizers.Tokenizer.from_file(str(path))
    except Exception as error:
        raise refuse(f"{path}: not a tokenizer.json ({str(error).splitlines()[0]})") from None
    return HuggingFaceTokenizer.wrap(path.name, loaded)


def train_bpe(texts: Iterable[str], vocab_size: int) -> HuggingFaceTokenizer:
    """A byte-level BPE (GPT-2's scheme) learned from ``texts``, ``END_OF_TEXT`` as id 0."""
    tokenizers = _import("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + 1:
        raise UsageError(f"vocab_size: bpe needs at least {len(alphabet) + 1}, got {vocab_size}")
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return HuggingFaceTokenizer.wrap(f"bpe-{vocab_size}", tokenizer)


def tiktoken_encoding(spec: str) -> TiktokenTokenizer:
    """``NAME`` from tiktoken's local cache, or a local ``.tiktoken`` ranks file."""
    tiktoken = _import("tiktoken")
    path = Path(spec)
    if path.is_file():
        from tiktoken.load import load_tiktoken_bpe
        from tiktoken_ext.openai_public import r50k_pat_str

        ranks = load_tiktoken_bpe(str(path))
        special = {END_OF_TEXT: max(ranks.values()) + 1}
        encoding = tiktoken.Encoding(
            path.stem, pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens=special
        )
        return TiktokenTokenizer(path.name, encoding)
    try:
        return TiktokenTokenizer(spec, tiktoken.get_encoding(spec))
    except ValueError as error:
        raise refuse(f"tiktoken:{spec}: {str(error).splitlines()[0]}") from None
    except Exception as error:
        raise refuse(
            f"tiktoken:{spec}: the encoding is not available locally ({type(error).__name__}); "
            "put its file in TIKTOKEN_CACHE_DIR or give tiktoken:FILE.tiktoken"
        ) from None


def load(spec: str, vocab_size: int | None, training_text) -> Tokenizer:
    """The tokenizer ``--tokenizer spec`` names; ``training_text()`` feeds ``bpe``."""
    if spec == "byte":
        return ByteTokenizer()
    if spec == "bpe":
        if vocab_size is None:
            raise UsageError("vocab_size: --tokenizer bpe needs --vocab-size")
        return train_bpe(training_text(), vocab_size)
    if spec.startswith("tiktoken:"):
        return tiktoken_encoding(spec.removeprefix("tiktoken:"))
    if Path(spec).is_file():
        return from_file(Path(spec))
    raise refuse(f"{spec!r}: give byte, bpe, a tokenizer.json file, or tiktoken:NAME|FILE")
