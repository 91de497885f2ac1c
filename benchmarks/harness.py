"""What the benchmark scripts share: one ``mtb`` command in a subprocess, its result read back."""

import json
import subprocess
import sys
from pathlib import Path


def run_mtb(bench: str, args: list[str], out: Path, timeout_s: float) -> dict:
    """``python -m mtb ARGS --output OUT``; its result document, or exit naming ``bench``."""
    cmd = [sys.executable, "-m", "mtb", *args, "--output", str(out)]
    print("running", " ".join(cmd[3:]), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s + 60)
    if done.returncode != 0:
        raise SystemExit(f"{bench} bench: run failed: {done.stderr.strip()[-500:]}")
    return json.loads(out.read_text())
