"""The GPU paths on a fake NVML, and the validity rules on hand-made launch records."""

import os
import sys
import time
import types

import pytest

from mtb_megatron import gpu, validity


class FakeNvml(types.ModuleType):
    """Just the pynvml calls mtb makes: two GPUs, memory growing while a launch runs."""

    class NVMLError(Exception):
        pass

    def __init__(self, processes):
        super().__init__("pynvml")
        self.processes, self.used, self.open = processes, 1_000, 0

    def nvmlInit(self):
        self.open += 1

    def nvmlShutdown(self):
        self.open -= 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, handle):
        self.used += 1_000
        return types.SimpleNamespace(used=self.used + handle, total=80 * 2**30)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [types.SimpleNamespace(pid=p, usedGpuMemory=2**20) for p in self.processes[handle]]


@pytest.fixture
def fake(monkeypatch):
    def install(processes):
        module = FakeNvml(processes)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install


def test_exclusivity_names_other_processes_but_not_this_one(fake):
    nvml = fake({0: [os.getpid()], 1: []})
    assert gpu.exclusivity([0, 1]) == {
        "status": "ok", "reason": None, "exclusive": True, "processes": []
    }  # fmt: skip
    nvml.processes = {0: [], 1: [4242]}
    busy = gpu.exclusivity([0, 1])
    assert busy["exclusive"] is False
    assert busy["processes"] == [{"gpu": 1, "pid": 4242, "used_bytes": 2**20}]
    assert nvml.open == 0


def test_memory_sampler_keeps_the_maximum_per_gpu(fake):
    nvml = fake({0: [], 1: []})
    with gpu.MemorySampler([0, 1], 0.01) as sampler:
        time.sleep(0.1)
    result = sampler.result()
    assert result["status"] == "ok" and result["samples"] >= 2 and nvml.open == 0
    assert [g["index"] for g in result["gpus"]] == [0, 1]
    assert result["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert 0 < result["gpus"][0]["max_used_bytes"] < result["gpus"][1]["max_used_bytes"]


def record(repeat: int, **changes) -> dict:
    values = {
        "repeat": repeat,
        "status": "ok",
        "command": ["python", "-m", "torch.distributed.run"],
        "stdout": {"sha256": "a" * 64},
        "stderr": {"sha256": "b" * 64},
        "gpu_exclusive_at_start": {"exclusive": True, "reason": None, "processes": []},
        "gpu_memory": {"status": "ok"},
    }
    return {**values, **changes}


CONTEXT = {
    "megatron": {"commit": "c" * 40, "dirty": False},
    "versions": {"torch": "2.13.0", "cuda": "12.8", "gpus": ["NVIDIA H100 80GB HBM3"]},
}
IMAGE = {"image": "nvcr.io/nvidia/pytorch@sha256:1", "source": "image", "problem": None}


def test_everything_in_place_is_performance_valid():
    records = [record(r) for r in (1, 2, 3)]
    assert validity.assess(records, "performance", IMAGE, CONTEXT) == []


def test_each_missing_condition_is_a_reason():
    busy = {"exclusive": False, "reason": None, "processes": [{"pid": 7}]}
    records = [record(1, gpu_exclusive_at_start=busy), record(2, status="oom")]
    context = {**CONTEXT, "megatron": {"commit": "c" * 40, "dirty": True}}
    image = validity.image_identity("", {})
    assert validity.assess(records, "compatibility", image, context) == [
        "evidence is compatibility (use --evidence performance)",
        "2 repeat(s), performance needs 3",
        "image unknown: not the project's image (MTB_IMAGE_* unset) and no --image",
        "repeat 1: GPUs were busy at start (pids [7])",
        "metadata missing: clean megatron checkout",
        "repeat 2: status oom",
    ]


def test_image_identity_declared_running_or_contradicting():
    running = {"MTB_IMAGE_NAME": "mtb", "MTB_IMAGE_DIGEST": "sha256:1"}
    assert validity.image_identity("", running)["source"] == "image"
    assert validity.image_identity("mtb@sha256:1", running)["problem"] is None
    assert validity.image_identity("x@sha256:2", {}) == {
        "image": "x@sha256:2", "source": "declared", "problem": None
    }  # fmt: skip
    clash = validity.image_identity("other@sha256:9", running)["problem"]
    assert clash == "declared image other@sha256:9, but running in sha256:1"


def test_throughput_is_shown_only_for_a_valid_topology():
    from rich.console import Console

    from mtb_megatron import benchmark, runner, tables

    iterations = [
        {
            "iteration": i,
            "elapsed_ms_per_iteration": 100.0 + i,
            "throughput_tflops_per_gpu": 40.0 + i,
        }
        for i in (1, 2, 3)
    ]
    records = [
        record(
            r,
            topology="2x1",
            tp=2,
            pp=1,
            dp=4,
            failure=None,
            metrics=runner.metrics(iterations, False),
        )
        for r in (1, 2, 3)
    ]
    valid = benchmark._topology_summary(records, [])
    assert valid["throughput_tflops_per_gpu"]["mean"] == pytest.approx(42.5)
    assert benchmark._topology_summary(records, ["a reason"])["throughput_tflops_per_gpu"] is None
    runs = [benchmark._flatten(r, True) for r in records]
    assert runs[0]["throughput_tflops_per_gpu"] == pytest.approx(42.5)
    document = {"mode": "run", "evidence": "performance", "performance_valid": True, "runs": runs}
    console = Console(width=140, record=True)
    console.print(tables.runs_table(document))
    text = console.export_text()
    assert "42.5" in text and "withheld" not in text and "performance-valid" in text
