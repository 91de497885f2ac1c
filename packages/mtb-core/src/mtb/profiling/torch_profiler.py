"""The ``torch`` profiler: PyTorch Profiler around a trial, one Chrome trace per rank.

The schedule skips the trial's warmup steps, then waits, warms up and records
``profile.active_steps`` steps once. The trace is exported when the trial
ends, not inside a step, so writing it never lands in a measured step.
"""

import os
from pathlib import Path
from typing import Any

from mtb import hookimpl
from mtb.profiling import trace


def trace_name(rank: int) -> str:
    return f"rank_{rank:05d}.trace.json.gz"


class TorchProfileSession:
    """A profiled trial on one rank: ``step()`` after every step, ``summary`` at the end."""

    def __init__(self, context, directory: Path):
        self.context = context
        self.directory = directory
        self.path = directory / trace_name(context.rank)
        self.summary: dict | None = None
        self._profiler: Any = None  # torch.profiler.profile, once entered

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile, schedule

        cfg = self.context.config
        activities = [ProfilerActivity.CPU]
        if self.context.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        plan = schedule(
            skip_first=cfg.training.warmup_steps,
            wait=cfg.profile.wait_steps,
            warmup=cfg.profile.warmup_steps,
            active=cfg.profile.active_steps,
            repeat=1,
        )
        self._profiler = profile(activities=activities, schedule=plan)
        self._profiler.__enter__()
        return self

    def step(self) -> None:
        self._profiler.step()

    def __exit__(self, *exc_info):
        self._profiler.__exit__(*exc_info)
        if exc_info[0] is None:
            self.export()
            self.summary = trace.analyse(trace.load(self.path), self.context.config.profile.top)
        return False

    def export(self) -> None:
        """The Chrome trace, written under a temporary name and renamed into place."""
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name[: -len('.json.gz')]}.partial.json.gz")
        self._profiler.export_chrome_trace(str(partial))
        os.replace(partial, self.path)


class TorchProfiler:
    """PyTorch Profiler with CPU activity, and CUDA kernel activity on a GPU."""

    name = "torch"
    description = "PyTorch Profiler: per-rank Chrome traces, cross-rank trace analysis"

    def session(self, context, directory: Path) -> TorchProfileSession:
        return TorchProfileSession(context, Path(directory))


@hookimpl
def mtb_register_profilers(register):
    register(TorchProfiler())
