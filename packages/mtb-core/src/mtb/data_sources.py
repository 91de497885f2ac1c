"""The built-in data sources, registered like a plugin's: synthetic tokens and token files.

``data.source`` (``--data``) is ``synthetic`` or a path; the first registered
source that recognizes the value serves it, in registration order: core's
``synthetic``, ``megatron`` (a prefix with ``PREFIX.idx`` beside it), then
``nanogpt`` (any other file). Every source samples through
:class:`mtb.data.GlobalBatch`, so a global batch holds the same sequences
however ranks and micro-batches split it, whatever the source.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from mtb import hookimpl
from mtb.errors import UsageError
from mtb.token_files import (
    FIELD,
    TokenFile,
    check_tokens,
    megatron_prefix,
    open_megatron,
    open_nanogpt,
)


def geometry(config, context) -> dict:
    """The sampling coordinates every source shares, from the run's config and rank."""
    return {
        "vocab_size": config.model.vocab_size,
        "seq_len": config.model.seq_len,
        "micro_batch_size": config.data.micro_batch_size,
        "seed": config.data.seed,
        "dp_rank": context.dp_rank,
        "dp_world_size": context.dp_world_size,
        "device": context.device,
    }


@attrs.frozen
class Synthetic:
    name: str = "synthetic"
    description: str = "arithmetic progressions modulo the vocabulary (nothing read)"

    def recognizes(self, source: str) -> bool:
        return source == self.name

    def check(self, config) -> None:
        """Nothing to check: any geometry has synthetic tokens."""

    def sampler(self, config, context):
        from mtb.data import SyntheticTokens  # torch: imported on the ranks, not at start-up

        return SyntheticTokens(**geometry(config, context))


@attrs.frozen
class TokenFileSource:
    """A token file opened by ``opener(config.data.source, config)``: checked before launch,
    memory-mapped on each rank."""

    name: str
    description: str
    recognizer: Callable[[str], object]
    opener: Callable[[Any], TokenFile]

    def recognizes(self, source: str) -> bool:
        return bool(self.recognizer(source))

    def check(self, config) -> None:
        check_tokens(self.opener(config), config.model.seq_len, config.model.vocab_size)

    def sampler(self, config, context):
        from mtb.data import TokenWindows

        return TokenWindows(**geometry(config, context), tokens=self.opener(config).tokens)


def _is_file(source: str) -> bool:
    return Path(source).is_file()


MEGATRON = TokenFileSource(
    "megatron",
    "Megatron-LM indexed dataset: PREFIX.bin + PREFIX.idx",
    megatron_prefix,
    lambda config: open_megatron(megatron_prefix(config.data.source) or config.data.source),
)
NANOGPT = TokenFileSource(
    "nanogpt",
    "nanoGPT headerless token file (.bin of data.dtype ids)",
    _is_file,
    lambda config: open_nanogpt(config.data.source, config.data.dtype),
)


@hookimpl
def mtb_register_data_sources(register):
    for source in (Synthetic(), MEGATRON, NANOGPT):
        register(source)


def resolve(pm, source: str):
    """The usable data source that serves ``source``, or one line naming the field."""
    for entry in pm.registry("data_source"):
        if entry.item.recognizes(source):
            return pm.registry("data_source").get(entry.name)
    names = ", ".join(pm.registry("data_source").names())
    raise UsageError(
        f"{FIELD}: {source}: not synthetic and not a token file (no such file); "
        f"data sources: {names}"
    )


def name_of(pm, config) -> str | None:
    """The name of the source ``config`` trains from; None when nothing serves it."""
    try:
        return resolve(pm, config.data.source).name
    except UsageError:
        return None
