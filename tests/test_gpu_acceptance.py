"""benchmarks/gpu_acceptance.py: its CPU mode, and a summary that survives failing items."""

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_acceptance.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


acceptance = load_script()


def python(code: str):
    """An item whose check runs ``python -c CODE`` and fails on a non-zero exit."""

    def check(ctx):
        done = ctx.command([sys.executable, "-c", code])
        acceptance.expect(done.returncode == 0, f"exit {done.returncode}")
        return {"output": done.stdout.strip()}

    return check


def skipped(ctx):
    raise acceptance.Skipped("nothing to check here")


def broken(ctx):
    return {}["missing"]


@pytest.mark.slow
def test_failing_hanging_and_broken_items_are_recorded_and_the_rest_still_runs(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(acceptance, "KILL_GRACE_S", 1.0)  # the sleeping item has no mtb inside
    Item = acceptance.Item
    items = [
        Item("first", "exits 3", python("raise SystemExit(3)"), 30),
        Item("hangs", "sleeps past its timeout", python("import time; time.sleep(60)"), 1),
        Item("broken", "a check that raises", broken, 30),
        Item("skips", "skips itself", skipped, 30),
        Item("gpu", "needs a GPU", python("print(1)"), 30, cpu_skip="needs a CUDA GPU"),
        Item("last", "prints", python("print('done')"), 30),
    ]
    started = time.monotonic()
    code = acceptance.main(["--output", str(tmp_path), "--device", "cpu"], items)
    assert time.monotonic() - started < 30  # the hanging item was stopped after 1 s + grace
    summary = json.loads((tmp_path / "summary.json").read_text())
    by_name = {r["name"]: r for r in summary["items"]}
    assert code == 1 and summary["status"] == "failed"
    assert [r["name"] for r in summary["items"]] == [i.name for i in items]
    assert by_name["first"]["status"] == "failed" and by_name["first"]["error"] == "exit 3"
    assert by_name["hangs"]["status"] == "failed"
    assert by_name["hangs"]["error"].startswith("timed out after 1 s: ")
    assert by_name["broken"]["error"] == "KeyError: 'missing'"
    assert by_name["skips"] == {
        **by_name["skips"],
        "status": "skipped",
        "reason": "nothing to check here",
    }
    assert by_name["gpu"]["reason"] == "needs a CUDA GPU"
    assert by_name["last"]["status"] == "ok" and by_name["last"]["figures"] == {"output": "done"}
    assert summary["counts"] == {"ok": 1, "failed": 3, "skipped": 2}
    assert "| first | failed |" in (tmp_path / "summary.md").read_text()
    assert "$ " in (tmp_path / "logs" / "first.log").read_text()


@pytest.mark.slow
def test_only_an_unknown_item_and_a_used_output_directory(tmp_path):
    items = [acceptance.Item(n, n, python("pass"), 30) for n in ("a", "b")]
    args = ["--output", str(tmp_path), "--device", "cpu", "--only", "b"]
    assert acceptance.main(args, items) == 0
    statuses = [r["status"] for r in json.loads((tmp_path / "summary.json").read_text())["items"]]
    assert statuses == ["skipped", "ok"]
    with pytest.raises(SystemExit, match=r"unknown item\(s\) c"):
        acceptance.main(["--output", str(tmp_path / "new"), "--only", "c"], items)
    with pytest.raises(SystemExit, match=r"is not empty; give a new directory"):
        acceptance.main(args, items)  # results of an earlier run are never mixed in


def test_mfu_targets_missed_are_reported_and_fail_nothing(tmp_path):
    ctx = acceptance.Context(tmp_path, "cuda")
    records = [
        {"name": "single_large_eager", "status": "ok", "figures": {"mfu": 0.31}},
        {"name": "single_large_compiled", "status": "ok", "figures": {"mfu": 0.36}},
    ]
    records[1]["figures"]["speedup_over_eager"] = 0.36 / 0.31
    ctx.results = {r["name"]: r for r in records}
    env = {"gpu": "NVIDIA H200", "torch": "2.11.0", "torch_cuda": "12.8", "python": "3.12"}
    document = acceptance.summary(ctx, env, records, 300.0, 480.0)
    assert document["status"] == "ok"
    targets = document["targets"]
    assert (targets["compiled_mfu_met"], targets["compiled_over_eager_met"]) == (False, False)
    assert targets["eager_mfu"] == 0.31 and targets["target_compiled_mfu"] == 0.40
    assert "compiled MFU 36.0 % (target >= 40.0 %), eager MFU 31.0 %, compiled/eager 1.16" in (
        acceptance.markdown(document)
    )


@pytest.mark.slow(reason="every CPU item of the acceptance script, each a real mtb launch")
@pytest.mark.timeout(1500)
def test_cpu_mode_runs_every_item_that_needs_no_gpu(tmp_path):
    """The CPU mode CI runs: tiny models over gloo; the rest skipped, each with its reason."""
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--output",
            str(tmp_path),
            "--device",
            "cpu",
            "--budget-s",
            "1200",
        ],
        capture_output=True,
        text=True,
        timeout=1400,
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    statuses = {r["name"]: r["status"] for r in summary["items"]}
    assert list(statuses) == [item.name for item in acceptance.ITEMS]
    assert done.returncode == 0, (done.stderr[-2000:], statuses)
    cpu_skipped = {item.name for item in acceptance.ITEMS if item.cpu_skip}
    assert {n for n, s in statuses.items() if s == "skipped"} == cpu_skipped
    for record in summary["items"]:
        assert record["status"] in acceptance.STATUSES
        assert record["status"] != "skipped" or record["reason"]
    figures = {r["name"]: r.get("figures") for r in summary["items"]}
    assert figures["single_large_eager"]["mfu"] > 0
    assert figures["checkpoint_resume"]["resumed_at_step"] == 3
    assert figures["checkpoint_resume"]["continuation_bitwise_equal"] is True
    assert figures["profile"]["timeline"] == "cpu"
    assert (tmp_path / "summary.md").read_text().startswith("# GPU acceptance (cpu): ok")
