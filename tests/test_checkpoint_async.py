"""Async checkpoints on 2 ranks: background writes over a gloo group, published in order."""

import json
import subprocess
import sys

import pytest

ARGS = [
    "--strategy", "ddp", "--nproc-per-node", "2", "--preset", "tiny", "--steps", "6",
    "--warmup-steps", "1", "--dropout", "0.1", "--save-every", "2", "--keep-last", "2",
    "--record-digests", "--device", "cpu", "--timeout", "120", "--peak-tflops", "1",
]  # fmt: skip


def mtb_run(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, "-m", "mtb", "run", *ARGS, "--output", str(out)]
    done = subprocess.run(
        [*cmd, "--checkpoint-dir", str(tmp_path / name), *extra],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


@pytest.mark.slow(reason="two 2-rank runs that save every step, in the foreground then not")
@pytest.mark.timeout(400)
def test_async_saves_match_sync_saves_and_block_less(tmp_path):
    sync = mtb_run(tmp_path, "sync")
    background = mtb_run(tmp_path, "async", "--async-save")
    assert background["state_digests"] == sync["state_digests"]
    record = background["checkpoint"]
    assert record["async_save"] is True
    assert [s["step"] for s in record["saves"]] == [2, 4, 6]
    assert all(s["path"].endswith(f"step_{s['step']:08d}") for s in record["saves"])
    assert len(record["blocked_s_total_per_rank"]) == 2
    published = sorted(p.name for p in (tmp_path / "async").glob("step_*"))
    assert published == ["step_00000004", "step_00000006"]  # keep-last 2, all READY
    assert all((tmp_path / "async" / name / "READY").is_file() for name in published)
    assert (tmp_path / "async" / "latest").read_text().strip() == "step_00000006"
