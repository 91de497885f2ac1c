"""The tokens a Megatron launch trains: mock data, or an indexed dataset checked before launch.

``--data PREFIX`` names a Megatron-LM indexed dataset (``PREFIX.bin`` +
``PREFIX.idx``, as ``mtb data prepare --format megatron`` writes it): core's
token-file reader checks its header, sizes and ids before anything launches, and
the result records each file's SHA256, so an mtb run and a Megatron-LM run can be
shown to have read the same tokens. The ids are passed through Megatron's
``NullTokenizer`` (``--vocab-size``), which leaves them as they are.
"""

from pathlib import Path

from mtb.api import ConfigError, token_files

FIELD = "data"
#: train on the whole file: one split, none held out (eval is off: --eval-iters 0)
SPLIT = "100,0,0"


def describe(config) -> dict:
    """What the launches read, checked: mock tokens, or the dataset's files and digests."""
    if not config.data:
        return {"source": "mock"}
    prefix = token_files.megatron_prefix(config.data)
    if prefix is None:
        raise ConfigError(
            FIELD,
            f"{config.data}: not a Megatron indexed dataset (no {Path(config.data).name}.idx "
            "beside it); give PREFIX of PREFIX.bin + PREFIX.idx "
            "(mtb data prepare --format megatron writes one)",
        )
    opened = token_files.open_megatron(prefix, field=FIELD)
    token_files.check_tokens(
        opened, config.seq_length, config.vocab_size, field=FIELD, vocab_field="vocab_size"
    )
    return {
        "source": "megatron",
        "prefix": str(prefix.resolve()),
        "tokens": len(opened.tokens),
        "documents": opened.documents,
        "files": token_files.megatron_files(prefix),
    }


def megatron_flags(config, cache_dir: str) -> list[str]:
    """pretrain_gpt.py's data flags: ``--mock-data``, or the dataset with its index cache
    in the run's own folder (Megatron writes one beside the data otherwise)."""
    if not config.data:
        return ["--mock-data"]
    prefix = (token_files.megatron_prefix(config.data) or Path(config.data)).resolve()
    cache = str(Path(cache_dir).resolve())
    return ["--data-path", str(prefix), "--split", SPLIT, "--data-cache-path", cache]


def line(data: dict) -> str:
    """One comment line of --dry-run: what the launches will read."""
    if data["source"] == "mock":
        return "# data: mock tokens (--mock-data)"
    digest = data["files"]["bin"]["sha256"][:16]
    return (
        f"# data: {data['prefix']} ({data['tokens']:,} tokens, {data['documents']:,} documents; "
        f".bin sha256 {digest}...)"
    )
