"""``mtb data``: make the token files ``mtb run --data`` (and nanoGPT, Megatron-LM) train from."""

import contextlib
from pathlib import Path

import click

from mtb.token_writers import WRITERS


@click.group("data")
def data_group():
    """Token files for --data: mtb data prepare TEXT... --output PREFIX."""


@data_group.command("prepare")
@click.argument(
    "texts",
    metavar="TEXT...",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
)
@click.option(
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="PREFIX: writes PREFIX.bin (+ PREFIX.idx), PREFIX.json",
)
@click.option(
    "--format",
    "format_",
    type=click.Choice(sorted(WRITERS)),
    default="megatron",
    show_default=True,
    help="megatron: PREFIX.bin + PREFIX.idx; nanogpt: a headerless PREFIX.bin",
)
@click.option(
    "--tokenizer",
    default="byte",
    show_default=True,
    help="byte (vocab 256, needs nothing), bpe (trained on TEXT to --vocab-size), "
    "a tokenizer.json, or tiktoken:NAME|FILE.tiktoken",
)
@click.option(
    "--vocab-size", type=click.IntRange(min=2), help="ids of the BPE --tokenizer bpe trains"
)
@click.option(
    "--documents",
    "split",
    type=click.Choice(("file", "paragraph", "jsonl")),
    default="file",
    show_default=True,
    help="a document is: each file, each blank-line separated paragraph, each JSON Lines record",
)
@click.option(
    "--json-key",
    default="text",
    show_default=True,
    help="the text field of a --documents jsonl record",
)
def prepare_command(texts, output, format_, tokenizer, vocab_size, split, json_key):
    """Tokenize TEXT files into a token file, each document ended by the end-of-text id.

    Files are renamed into place when whole: Ctrl-C or SIGTERM (exit 130,
    143) leaves the previous files as they were. Prints what it wrote and
    the vocabulary a model needs (--vocab-size of mtb run). The .bin/.idx
    pair reads with megatron-core's IndexedDataset; the nanoGPT .bin with
    np.memmap(PATH, dtype=np.uint16) (uint32 above 65536 ids: train with
    --data-dtype uint32). Details: docs/data.md.
    """
    from mtb import data_prepare, tokenizing
    from mtb.launch import interruptible

    inputs = data_prepare.Inputs(tuple(texts), split, json_key)
    chosen = tokenizing.load(tokenizer, vocab_size, inputs.texts)
    prefix = data_prepare.output_prefix(output)
    with interruptible(), _progress(inputs.total_bytes) as advance:
        manifest = data_prepare.prepare(inputs, prefix, format_, chosen, advance)
    _print_summary(prefix, manifest)


@contextlib.contextmanager
def _progress(total: int):
    """A bar over the input bytes on stderr (transient: the summary stays alone)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    from mtb.console import stderr

    columns = ("tokenizing", BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=stderr, transient=True) as bar:
        task = bar.add_task("tokenizing", total=total)
        yield lambda read: bar.update(task, advance=read)


def _print_summary(prefix: Path, manifest: dict) -> None:
    from mtb.console import stdout

    files = ", ".join(str(prefix.with_name(name)) for name in manifest["files"])
    rate = manifest["tokens"] / max(manifest["seconds"], 1e-9)
    tokens, vocab = manifest["tokens"], manifest["vocab_size"]
    megatron = manifest["format"] == "megatron"
    data = prefix if megatron else prefix.with_name(manifest["files"][0])
    dtype = (
        "" if megatron or manifest["dtype"] == "uint16" else f" --data-dtype {manifest['dtype']}"
    )
    for line in (
        f"wrote {files}: {manifest['documents']} documents, {tokens} tokens "
        f"({manifest['dtype']}), {rate:,.0f} tokens/s",
        f"tokenizer {manifest['tokenizer']}: vocab {vocab}, end-of-text id {manifest['eot_id']}",
        f"train on it: mtb run --data {data} --vocab-size {vocab}{dtype}",
    ):
        stdout.print(line, soft_wrap=True, highlight=False)
