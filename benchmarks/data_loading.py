"""What reading tokens costs: synthetic against a memmapped token file, warm and cold.

Run as ``python benchmarks/data_loading.py --output results/data-loading.json``
(``nox -s bench`` does). The corpus is Python's own standard library (its
top-level ``.py`` files), so every machine has it. Three tables:

(a) ``mtb data prepare``: the corpus tokenized by the byte tokenizer and by a
    BPE trained on it, to a Megatron ``.bin``/``.idx``: documents, tokens,
    seconds, tokens/s.
(b) One data-parallel rank's micro-batch, per rank of ``--ranks``: the
    ``small`` geometry (seq 256, micro-batch 8) drawn ``--batches`` times from
    synthetic tokens, from the memmap with the file in the page cache (warm),
    and with the file's pages dropped before every batch
    (``posix_fadvise(DONTNEED)`` on the unmapped file, then mapped again:
    cold, each window read from the disk).
    Median and p90 ms per batch, and tokens/s.
(c) ``mtb run --strategy ddp`` on 2 ranks, ``tiny``, ``--steps`` steps on the
    byte corpus and on synthetic tokens: mean ``data ms`` of a step, its share
    of the step, and the loss at the first and last step. The two result
    documents are kept under ``--runs`` and rendered by ``mtb report`` there,
    whose "Training loss per step" figure draws the two curves side by side.
"""

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from harness import run_mtb, start_provenance, write_table_document
from rich.console import Console
from rich.table import Table

SMALL = {"seq_len": 256, "micro_batch_size": 8}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/data-loading.json")
    parser.add_argument("--runs", default="results/data-loading", help="the two runs and report")
    parser.add_argument("--batches", type=int, default=200, help="micro-batches timed per row")
    parser.add_argument("--ranks", type=int, default=2, help="data-parallel ranks of table (b)")
    parser.add_argument("--bpe-vocab", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=200, help="steps of each run of table (c)")
    parser.add_argument("--timeout", type=float, default=900)
    return parser.parse_args(argv)


def corpus() -> list[Path]:
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def prepare(texts: list[Path], prefix: Path, tokenizer: list[str]) -> dict:
    """One ``mtb data prepare`` in a subprocess (as a user runs it); its manifest."""
    import json

    command = [sys.executable, "-m", "mtb", "data", "prepare", *map(str, texts)]
    command += ["--output", str(prefix), *tokenizer]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    return json.loads(prefix.with_name(prefix.name + ".json").read_text())


def prepare_row(manifest: dict) -> dict:
    keys = ("tokenizer", "vocab_size", "documents", "tokens", "seconds")
    return {
        "table": "prepare",
        **{key: manifest[key] for key in keys},
        "tokens_per_s": manifest["tokens"] / manifest["seconds"],
    }


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache, so the next read goes to the disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(descriptor)


def time_batches(sampler, batches: int, before=lambda: None) -> list[float]:
    times = []
    for step in range(batches):
        before()
        started = time.perf_counter()
        sampler.batch(step, 0)
        times.append((time.perf_counter() - started) * 1e3)
    return times


def token_memmap(prefix: Path):
    """The tokens of PREFIX.bin as the data source maps them (uint16: a byte vocabulary)."""
    import numpy as np

    return np.memmap(prefix.with_name(prefix.name + ".bin"), dtype=np.uint16, mode="r")


def reopened_cold(sampler, prefix: Path):
    """Before each batch: unmap the file, drop its pages, map it again. (The kernel keeps
    the pages a live mapping holds; an unmapped file's pages it drops.)"""

    def before():
        sampler.tokens = None
        evict(prefix.with_name(prefix.name + ".bin"))
        sampler.tokens = token_memmap(prefix)

    return before


def sampler_rows(prefix: Path, args) -> list[dict]:
    """Table (b): each source, each rank, median and p90 ms of one micro-batch."""
    from mtb.api import SyntheticTokens, TokenWindows

    rows = []
    for rank in range(args.ranks):
        common = {"vocab_size": 256, "seed": 1234, "dp_rank": rank, "dp_world_size": args.ranks}
        tokens = token_memmap(prefix)
        cold = TokenWindows(**SMALL, **common, tokens=tokens)
        sources = {
            "synthetic": (SyntheticTokens(**SMALL, **common), lambda: None),
            "memmap warm": (TokenWindows(**SMALL, **common, tokens=tokens), lambda: None),
            "memmap cold": (cold, reopened_cold(cold, prefix)),
        }
        for name, (sampler, before) in sources.items():
            time_batches(sampler, 5, before)  # first touches, imports
            times = time_batches(sampler, args.batches, before)
            median = statistics.median(times)
            per_batch = SMALL["seq_len"] * SMALL["micro_batch_size"]
            rows.append(
                {
                    "table": "sampler",
                    "source": name,
                    "rank": rank,
                    "batches": args.batches,
                    "median_ms": median,
                    "p90_ms": statistics.quantiles(times, n=10)[-1],
                    "tokens_per_s": per_batch / (median / 1e3),
                }
            )
    return rows


def run_rows(prefix: Path, args) -> list[dict]:
    """Table (c): ddp on 2 ranks, tiny, on the byte corpus and on synthetic tokens."""
    runs = Path(args.runs)
    runs.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, data in (("byte corpus", str(prefix)), ("synthetic", "synthetic")):
        out = runs / f"ddp-tiny-{name.split()[0]}.json"
        flags = ["run", "--strategy", "ddp", "--nproc-per-node", "2", "--preset", "tiny"]
        flags += ["--data", data, "--steps", str(args.steps), "--warmup-steps", "2"]
        flags += ["--lr", "3e-3", "--timeout", str(args.timeout), "--overwrite"]
        document = run_mtb("data-loading", flags, out, args.timeout)
        summary, steps = document["summary"], document["trials"][0]["steps"]
        rows.append(
            {
                "table": "run",
                "data": name,
                "steps": len(steps),
                "data_ms": summary["data_ms"]["mean"],
                "step_ms": summary["step_ms"]["mean"],
                "data_share": summary["data_ms"]["mean"] / summary["step_ms"]["mean"],
                "first_loss": steps[0]["loss"],
                "last_loss": steps[-1]["loss"],
                "result": str(out),
            }
        )
    report = runs / "report.html"
    subprocess.run(
        [sys.executable, "-m", "mtb", "report", str(runs), "-o", str(report)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    print(f"loss curves: {report}", file=sys.stderr)
    return rows


def tables(rows: list[dict]) -> list[Table]:
    prepared = Table(title="(a) mtb data prepare: the standard library's .py files")
    for column in ("tokenizer", "vocab", "documents", "tokens", "s", "tokens/s"):
        prepared.add_column(column, justify="right")
    sampled = Table(title="(b) one micro-batch (seq 256 x 8) per data-parallel rank")
    for column in ("source", "rank", "median ms", "p90 ms", "tokens/s"):
        sampled.add_column(column, justify="right")
    ran = Table(title="(c) ddp, 2 ranks, tiny: data ms in the step")
    for column in ("data", "steps", "data ms", "step ms", "data share", "first loss", "last loss"):
        ran.add_column(column, justify="right")
    for r in rows:
        if r["table"] == "prepare":
            prepared.add_row(
                r["tokenizer"],
                str(r["vocab_size"]),
                f"{r['documents']:,}",
                f"{r['tokens']:,}",
                f"{r['seconds']:.2f}",
                f"{r['tokens_per_s']:,.0f}",
            )
        elif r["table"] == "sampler":
            sampled.add_row(
                r["source"],
                str(r["rank"]),
                f"{r['median_ms']:.3f}",
                f"{r['p90_ms']:.3f}",
                f"{r['tokens_per_s']:,.0f}",
            )
        else:
            ran.add_row(
                r["data"],
                str(r["steps"]),
                f"{r['data_ms']:.3f}",
                f"{r['step_ms']:.2f}",
                f"{r['data_share'] * 100:.1f} %",
                f"{r['first_loss']:.3f}",
                f"{r['last_loss']:.3f}",
            )
    return [prepared, sampled, ran]


def main(argv=None) -> int:
    args = parse_args(argv)
    begun = start_provenance()
    texts = corpus()
    with tempfile.TemporaryDirectory(dir=Path(args.output).parent) as work:
        byte = Path(work) / "stdlib_byte"
        bpe = Path(work) / "stdlib_bpe"
        rows = [prepare_row(prepare(texts, byte, []))]
        tokenizer = ["--tokenizer", "bpe", "--vocab-size", str(args.bpe_vocab)]
        rows.append(prepare_row(prepare(texts, bpe, tokenizer)))
        rows += sampler_rows(byte, args)
        rows += run_rows(byte, args)
    console = Console(width=120)
    for table in tables(rows):
        console.print(table)
    write_table_document("data-loading", args, rows, [], begun)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
