"""An indexed dataset written by megatron-core's own builder is the data mtb trains on."""

import numpy as np
import pytest
import torch

from mtb.token_files import open_megatron

pytest.importorskip("megatron.core", reason="needs the [megatron-core] extra")


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_mtb_reads_what_megatron_cores_builder_writes(tmp_path, dtype):
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

    documents = [[5, 6, 7, 50256], [1, 2, 50256], list(range(100, 130))]
    prefix = tmp_path / "corpus_text_document"
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for document in documents:
        builder.add_item(torch.tensor(document))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    opened = open_megatron(prefix)
    assert opened.tokens.dtype == dtype and opened.documents == len(documents)
    theirs = IndexedDataset(str(prefix))
    assert opened.tokens.tolist() == [int(t) for i in range(len(theirs)) for t in theirs[i]]
    assert opened.tokens.tolist() == [t for document in documents for t in document]
