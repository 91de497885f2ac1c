"""A stale DeepSpeed op build lock is refused in one line, not waited on until the timeout.

Issue 19, item 9: an interrupted build leaves BUILD_DIR/lock; torch's
FileBaton then polls for it forever.
"""

import subprocess
import sys
import time

import pytest
from conftest import launch

from mtb_strategies.extension_locks import stale_locks

# a builder mid-build, as FileBaton.try_acquire leaves it: the lock created and held open
HOLD = (
    "import os, sys, time; os.open(sys.argv[1], os.O_CREAT | os.O_EXCL); "
    "print(1, flush=True); time.sleep(120)"
)


@pytest.fixture
def extensions(tmp_path, monkeypatch):
    root = tmp_path / "torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(root))
    return root


def plant(path):
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    return path


@pytest.mark.timeout(60)
def test_a_lock_nobody_holds_is_stale_in_both_layouts(tmp_path):
    flat = plant(tmp_path / "flat" / "deepspeed_shm_comm" / "lock")
    nested = plant(tmp_path / "cache" / "py311_cpu" / "deepspeed_shm_comm" / "lock")
    assert stale_locks(tmp_path / "flat", confirm_s=0.1) == [flat]
    assert stale_locks(tmp_path / "cache", confirm_s=0.1) == [nested]


@pytest.mark.timeout(60)
def test_a_lock_a_live_builder_holds_is_not_stale(tmp_path):
    lock = tmp_path / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"1"
        assert stale_locks(tmp_path, confirm_s=0.1) == []
    finally:
        holder.kill()
        holder.wait()
    assert stale_locks(tmp_path, confirm_s=0.1) == [lock]  # its builder died: now stale


@pytest.mark.timeout(300)
def test_zero_run_refuses_a_stale_lock_in_one_line(tmp_path, extensions):
    pytest.importorskip("deepspeed")
    lock = plant(extensions / "deepspeed_shm_comm" / "lock")
    started = time.monotonic()
    done, result, _ = launch("zero2", tmp_path, "--timeout", "40")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"Error: {lock}: stale lock of an interrupted torch extension build (no process holds "
        f"it; a ZeRO run would wait on it forever); remove it with: rm {lock}"
    ]
    assert result is None and lock.exists() and time.monotonic() - started < 35
