"""GPU facts from NVML (the optional ``[gpu]`` extra): exclusivity at start, memory during a run.

Without the bindings, the driver or a GPU, each answer says ``skipped`` with
the reason instead of guessing. NVML numbers GPUs in PCI bus order; the
launch's GPUs are read from CUDA_VISIBLE_DEVICES (integer indices) or taken
as the first ``nproc_per_node``, which is right when CUDA_DEVICE_ORDER is
PCI_BUS_ID or the machine has one kind of GPU.
"""

import os
import threading


def nvml():
    """The initialised pynvml module, or (None, why not)."""
    try:
        import pynvml
    except ImportError:
        return None, "pynvml is not installed (pip install 'mtb-megatron[gpu]')"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as error:
        return None, f"NVML is not available: {error}"
    if count == 0:
        pynvml.nvmlShutdown()
        return None, "NVML sees no GPU"
    return pynvml, None


def launch_gpus(nproc_per_node: int) -> list[int]:
    """NVML indices of the GPUs this node's ranks use."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    indices = [int(p) for p in visible.split(",") if p.strip().isdigit()]
    return indices[:nproc_per_node] if indices else list(range(nproc_per_node))


def skipped(reason: str) -> dict:
    return {"status": "skipped", "reason": reason}


def exclusivity(indices: list[int]) -> dict:
    """Whether any process already computes on the launch's GPUs (checked before it starts)."""
    module, reason = nvml()
    if module is None:
        return {**skipped(reason), "exclusive": None}
    try:
        busy = []
        for index in indices:
            handle = module.nvmlDeviceGetHandleByIndex(index)
            for process in module.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid == os.getpid():  # this process, should torch have touched the GPU
                    continue
                busy.append({"gpu": index, "pid": process.pid, "used_bytes": process.usedGpuMemory})
        return {"status": "ok", "reason": None, "exclusive": not busy, "processes": busy}
    except module.NVMLError as error:
        return {**skipped(f"NVML query failed: {error}"), "exclusive": None}
    finally:
        module.nvmlShutdown()


class MemorySampler:
    """Samples used memory of the launch's GPUs on a thread while the launch runs."""

    def __init__(self, indices: list[int], interval_s: float):
        self.indices = indices
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = None
        self._module, self._reason = None, None
        self._gpus: list[dict] = []
        self._samples = 0

    def __enter__(self):
        self._module, self._reason = nvml()
        if self._module is None:
            return self
        try:
            handles = [self._module.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
            self._gpus = [
                {
                    "index": i,
                    "name": _text(self._module.nvmlDeviceGetName(h)),
                    "total_bytes": self._module.nvmlDeviceGetMemoryInfo(h).total,
                    "max_used_bytes": 0,
                    "_handle": h,
                }
                for i, h in zip(self.indices, handles, strict=True)
            ]
        except self._module.NVMLError as error:
            self._reason = f"NVML query failed: {error}"
            self._stop_nvml()
            return self
        self._thread = threading.Thread(target=self._run, name="gpu-memory", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while True:
            self._sample()
            if self._stop.wait(self.interval_s):
                self._sample()
                return

    def _sample(self):
        try:
            for gpu in self._gpus:
                used = self._module.nvmlDeviceGetMemoryInfo(gpu["_handle"]).used
                gpu["max_used_bytes"] = max(gpu["max_used_bytes"], used)
            self._samples += 1
        except self._module.NVMLError as error:
            self._reason = f"NVML sampling failed: {error}"
            self._stop.set()

    def _stop_nvml(self):
        self._module.nvmlShutdown()
        self._module = None

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._stop_nvml()

    def result(self) -> dict:
        """Max used bytes per GPU over the samples, or skipped with the reason."""
        if not self._gpus or not self._samples:
            return skipped(self._reason or "no sample was taken")
        gpus = [{k: v for k, v in g.items() if k != "_handle"} for g in self._gpus]
        return {
            "status": "ok",
            "reason": self._reason,
            "interval_s": self.interval_s,
            "samples": self._samples,
            "gpus": gpus,
        }


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
