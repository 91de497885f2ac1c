"""The busy-device guard: a CUDA run refuses GPUs that other processes already use.

Numbers measured next to another job's kernels and memory are not the
machine's numbers. Above ``LIMIT_BYTES`` in use by other processes on a GPU
the run would use, the launch stops with one line unless ALLOW_BUSY_GPUS=1;
what was seen (and whether it was overridden) goes into every result's
provenance as ``gpu_guard``.
"""

import json
import os
import shutil
import subprocess

from mtb.errors import UsageError

LIMIT_BYTES = 2**30
ALLOW_VARIABLE = "ALLOW_BUSY_GPUS"
#: the launcher's findings, passed to the workers that write the result
RECORD_VARIABLE = "MTB_GPU_GUARD"


def nvidia_smi(*args: str) -> list[list[str]] | None:
    """CSV rows of an ``nvidia-smi`` query; None without a working nvidia-smi."""
    try:
        done = subprocess.run(
            ["nvidia-smi", *args, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line]


def _visible(index: str, uuid: str) -> bool:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return True
    return any(item.strip() in (index, uuid) for item in visible.split(","))


def foreign_usage() -> list[dict] | None:
    """Per visible GPU, the bytes other processes hold; None when nvidia-smi cannot tell.

    Processes are read from ``--query-compute-apps``; where none are listed
    (a container's own PID namespace hides them) the GPU's whole
    ``memory.used`` counts as foreign.
    """
    if shutil.which("nvidia-smi") is None:
        return None
    gpus = nvidia_smi("--query-gpu=index,uuid,memory.used")
    apps = nvidia_smi("--query-compute-apps=gpu_uuid,pid,used_memory")
    if gpus is None or apps is None:
        return None
    usage = []
    for index, uuid, used_mib in gpus:
        if not _visible(index, uuid):
            continue
        mine = str(os.getpid())
        listed = [row for row in apps if row[0] == uuid]
        others = [int(row[2]) for row in listed if row[1] != mine and row[2].isdigit()]
        used = sum(others) if listed else int(used_mib) if used_mib.isdigit() else 0
        usage.append({"index": int(index), "uuid": uuid, "foreign_bytes": used * 2**20})
    return usage


def check() -> None:
    """Refuse busy GPUs (one line, exit 2) unless ALLOW_BUSY_GPUS=1; record what was seen."""
    usage = foreign_usage()
    busy = [gpu for gpu in usage or [] if gpu["foreign_bytes"] > LIMIT_BYTES]
    allowed = os.environ.get(ALLOW_VARIABLE) == "1"
    record = {"checked": usage is not None, "gpus": usage, "busy": busy, "allowed_busy": allowed}
    os.environ[RECORD_VARIABLE] = json.dumps(record)
    if busy and not allowed:
        names = ", ".join(f"GPU {g['index']} ({g['foreign_bytes'] / 2**30:.1f} GiB)" for g in busy)
        raise UsageError(
            f"launch.device: {names} already in use by other processes (limit "
            f"{LIMIT_BYTES / 2**30:.0f} GiB); wait for them or set {ALLOW_VARIABLE}=1"
        )


def recorded() -> dict | None:
    """What the launcher's check saw, for the result's provenance (None: not a CUDA run)."""
    raw = os.environ.get(RECORD_VARIABLE)
    return json.loads(raw) if raw else None
