"""What a run prints: progress on stderr, the summary table on stdout."""

import sys

from rich.console import Console
from rich.table import Table

from mtb.metrics import above_peak

#: the caption under a summary whose MFU exceeds 100 %
ABOVE_PEAK = (
    "MFU above 100 %: the peak it divides by is below what this run reached, so it is not "
    "the device's peak (see environment.peak_flops_measurement, or pass --peak-tflops)"
)


def plain_console(**options) -> Console:
    """A console that prints text as given: no markup, no highlighting.

    Messages carry user and hint text such as ``pip install 'mtb-megatron[gpu]'``,
    whose brackets rich would read as markup and drop. Styles are set with
    ``rich.text.Text`` instead.
    """
    return Console(highlight=False, markup=False, **options)


stdout = plain_console()
stderr = plain_console(stderr=True)


def _fmt(stat: dict, scale: float = 1.0, digits: int = 1) -> str:
    if not stat or stat.get("mean") is None:
        return "n/a"
    text = f"{stat['mean'] * scale:,.{digits}f}"
    if stat["n"] > 1:
        text += f" ± {stat['std'] * scale:,.{digits}f}"
    return text + (" (noisy)" if stat.get("noisy") else "")


def _bytes(stat: dict) -> str:
    if not stat or stat.get("mean") is None:
        return "n/a"
    return f"{stat['mean'] / 2**20:,.1f} MiB"


def _mfu(stat: dict) -> str:
    text = _fmt(stat, scale=100.0, digits=2)
    return f"{text} (above peak!)" if above_peak((stat or {}).get("max")) else text


def summary_table(document: dict) -> Table:
    """The headline numbers of one train result."""
    cfg, env, summary = document["config"], document["environment"], document["summary"]
    runs = "single run" if summary["single_run"] else f"{summary['trials']} trials, mean ± std"
    table = Table(title=f"{cfg['strategy']}, preset {cfg['preset']}: {runs}", min_width=60)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("world size", str(env["world_size"])),
        ("device / backend", f"{env['device']} / {env['backend'] or 'none'}"),
        ("precision", cfg["training"]["precision"]),
        ("parameters", f"{document['model']['parameters'] / 1e6:,.2f} M"),
        ("tokens/s (global)", _fmt(summary["tokens_per_s"])),
        ("tokens/s per device", _fmt(summary["tokens_per_s_per_device"])),
        ("step ms", _fmt(summary["step_ms"], digits=2)),
        ("  data ms", _fmt(summary["data_ms"], digits=2)),
        ("  forward+backward ms", _fmt(summary["forward_backward_ms"], digits=2)),
        ("  optimizer ms", _fmt(summary["optimizer_ms"], digits=2)),
        ("MFU %", _mfu(summary["mfu"])),
        ("peak RSS per rank", _bytes(summary["peak_rss_bytes"])),
        ("model state per rank", _bytes(summary["model_state_bytes_per_rank"])),
        ("activations per rank", _bytes(summary.get("activation_saved_bytes_per_rank"))),
        ("model state estimate", _estimate(summary)),
        ("final loss", _fmt(summary["final_loss"], digits=4)),
    ]
    if "cuda_max_allocated_bytes" in summary:
        rows.append(("CUDA max allocated", _bytes(summary["cuda_max_allocated_bytes"])))
    if cfg["training"].get("compile"):
        rows.append(("compile s (in warmup)", _fmt(summary["compile_s"], digits=1)))
    for row in rows:
        table.add_row(*row)
    if above_peak((summary["mfu"] or {}).get("max")):
        table.caption = ABOVE_PEAK
    return table


def _estimate(summary: dict) -> str:
    """The analytic model-state bytes, flagged when they miss the measured ones by over 10 %."""
    shown = _bytes({"mean": summary["model_state_estimate_bytes"]["total"]})
    if not summary.get("model_state_estimate_off"):
        return shown
    return f"{shown} (off by {summary['model_state_estimate_error']:+.0%}: see docs/metrics.md)"


#: width of tables written to a file or pipe, where rich would otherwise assume 80 columns
PIPE_WIDTH = 200


def print_wide(table: Table) -> None:
    """A table on stdout, unwrapped up to PIPE_WIDTH columns when stdout is not a terminal."""
    console = stdout if stdout.is_terminal else plain_console(width=PIPE_WIDTH)
    console.print(table)


def progress_line(text: str) -> None:
    """A progress message on stderr (never mixed into stdout's table)."""
    stderr.print(text)
    sys.stderr.flush()
