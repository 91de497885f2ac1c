"""What ``mtb data prepare`` writes in the Megatron layout, megatron-core's own reader reads."""

import attrs
import numpy as np
import pytest

from mtb.data_prepare import Inputs, prepare
from mtb.tokenizing import ByteTokenizer

pytest.importorskip("megatron.core", reason="needs the [megatron-core] extra")

TEXTS = ["first document\n", "zweites Dokument: ünïcode\n", "3\n"]


@attrs.frozen
class WideTokenizer:
    """Ids above 65500, so the index declares int32 as Megatron-LM's optimal_dtype picks."""

    name: str = "wide"
    vocab_size: int = 70_000
    eot_id: int = 69_999

    def encode_batch(self, texts):
        return [[66_000 + ord(c) for c in text] for text in texts]


@pytest.mark.parametrize(
    ("tokenizer", "dtype"), [(ByteTokenizer(), np.uint16), (WideTokenizer(), np.int32)]
)
def test_megatron_core_reads_every_prepared_document(tmp_path, tokenizer, dtype):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    paths = []
    for number, text in enumerate(TEXTS):
        paths.append(tmp_path / f"{number}.txt")
        paths[-1].write_text(text)
    prefix = tmp_path / "corpus_text_document"
    prepare(Inputs(tuple(paths)), prefix, "megatron", tokenizer)
    theirs = IndexedDataset(str(prefix))
    assert theirs.index.dtype == dtype
    assert len(theirs) == len(TEXTS) and list(theirs.document_indices) == [0, 1, 2, 3]
    for number, text in enumerate(TEXTS):
        expected = [*tokenizer.encode_batch([text])[0], tokenizer.eot_id]
        assert theirs[number].tolist() == list(expected)
