"""Helpers: run an mtb command on gloo CPU ranks in a subprocess, read its result."""

import json
import os
import subprocess
import sys

import pytest


def run_mtb(tmp_path, name: str, *args, nproc: int = 2):
    """``mtb ARGS --nproc-per-node N --device cpu``; returns (process, document or None)."""
    out = tmp_path / f"{name}.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "mtb", *args, "--nproc-per-node", str(nproc)]
    cmd += ["--device", "cpu", "--timeout", "110", "--output", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=115)
    return done, json.loads(out.read_text()) if out.exists() else None


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("launched")
