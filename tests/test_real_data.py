"""Two data-parallel ranks trained on a token file ``mtb data prepare`` made from Python's
own standard library learn from it: the loss falls over 200 steps, and the report draws
the curve beside a run on synthetic tokens."""

import json
import statistics
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

STEPS = 200


def mtb(*args, timeout=240):
    command = [sys.executable, "-m", "mtb", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_ddp_on_prepared_text_learns_and_is_plotted_beside_synthetic(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mtb_report.plots import loss_curves

    texts = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:40]
    mtb("data", "prepare", *texts, "--output", tmp_path / "stdlib")
    common = ("--preset", "tiny", "--warmup-steps", "2", "--timeout", "240")
    mtb(
        "run",
        "--strategy",
        "ddp",
        "--nproc-per-node",
        "2",
        "--data",
        tmp_path / "stdlib",
        "--steps",
        STEPS + 2,
        "--lr",
        "3e-3",
        *common,
        "--output",
        tmp_path / "text.json",
    )
    mtb(
        "run",
        "--strategy",
        "single",
        "--steps",
        14,
        *common,
        "--output",
        tmp_path / "synthetic.json",
    )
    on_text, synthetic = (
        json.loads((tmp_path / f"{n}.json").read_text()) for n in ("text", "synthetic")
    )
    assert on_text["components"]["data_source"]["name"] == "megatron"
    losses = [step["loss"] for step in on_text["trials"][0]["steps"]]
    assert len(losses) == STEPS
    first, last = statistics.mean(losses[:20]), statistics.mean(losses[-20:])
    assert last < 0.75 * first, (first, last)
    figure = loss_curves(plt, [on_text, synthetic])
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert labels == ["ddp [sync last] x2 on stdlib", "single x1 on synthetic"]
