"""Without a GPU: NVML answers are skipped with the reason, and the GPU check refuses cleanly."""

import subprocess
import sys

import pytest

from mtb_megatron import gpu


def test_on_cpu_exclusivity_and_memory_are_skipped_with_the_reason():
    module, reason = gpu.nvml()
    if module is not None:
        pytest.skip("NVML sees a GPU here")
    assert reason
    assert gpu.exclusivity([0]) == {"status": "skipped", "reason": reason, "exclusive": None}
    with gpu.MemorySampler([0], 0.05) as sampler:
        pass
    assert sampler.result() == {"status": "skipped", "reason": reason}


def test_launch_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7")
    assert gpu.launch_gpus(2) == [3, 5]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu.launch_gpus(2) == [0, 1]


def test_gpu_check_script_refuses_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: run the script itself")
    done = subprocess.run(
        [sys.executable, "-m", "mtb_megatron.gpu_check"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "Error: the GPU check needs a CUDA GPU (megatron-core's GPTModel needs CUDA)"
    )


BUILD = """
import torch
from mtb_megatron import gpu_check
gpu_check.init_parallel("gloo")
model = gpu_check.build_model(torch.float32)
print(type(model).__name__, sum(p.numel() for p in model.parameters()))
"""


def test_gpu_check_model_builds_with_the_pinned_megatron_core_on_cpu():
    """The script's megatron-core calls, up to the forward that needs CUDA."""
    pytest.importorskip("megatron.core", reason="needs the [megatron-core] extra")
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", BUILD], capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, done.stderr
    # embeddings 1024x128 + 64x128, 2 layers of 198,272 (LNs, QKV, proj, fc1, fc2 with
    # biases), final LN 256, untied output layer 1024x128
    assert done.stdout.split() == ["GPTModel", str(131072 + 8192 + 2 * 198272 + 256 + 131072)]
