"""Launch tiny 2-rank runs with the installed loggers and this folder's test plugins."""

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs

PLUGINS = Path(__file__).parent / "plugins"
STRATEGY = "loggers-test-allreduce"
FAILING = "loggers-test-failing"
#: four steps, the first one warmup; a fixed MFU peak spares each rank a matmul calibration
TINY = ["--preset", "tiny", "--steps", "4", "--warmup-steps", "1", "--peak-tflops", "1"]


@attrs.frozen
class Run:
    returncode: int
    stderr: str
    document: dict | None
    logs: Path


def environment() -> dict:
    """Only this package's entry point and the test plugins: other installed plugins stay out."""
    paths = [str(PLUGINS), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        **os.environ,
        "MTB_LOAD_PLUGINS": "loggers",
        "MTB_PLUGIN_MODULES": "mtb_loggers_test_allreduce,mtb_loggers_test_failing",
        "PYTHONPATH": os.pathsep.join(paths),
        "WANDB_SILENT": "true",
    }


def mtb(*args, timeout: int = 240) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mtb", *map(str, args)]
    return subprocess.run(
        command, env=environment(), capture_output=True, text=True, timeout=timeout
    )


def launch(directory: Path, *args) -> Run:
    """``mtb run`` of the test strategy on 2 CPU ranks, its result at DIRECTORY/r.json."""
    output = directory / "r.json"
    ranks = ["--device", "cpu", "--nproc-per-node", "2", "--timeout", "200"]
    done = mtb("run", "--strategy", STRATEGY, *TINY, *ranks, *args, "--output", output)
    document = json.loads(output.read_text()) if output.exists() else None
    return Run(done.returncode, done.stderr, document, directory / "r-logs")
