"""Phase timing of one step: perf_counter on CPU, CUDA events on a GPU.

CUDA work is asynchronous, so host timestamps would time kernel launches;
events recorded on the stream time the work itself without extra syncs.
"""

import time
from typing import Any

import torch


class PhaseClock:
    """Marks phase boundaries within a step and reports each phase's milliseconds."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list[tuple[str, Any]] = []  # CUDA events or perf_counter seconds

    def start(self) -> None:
        self.marks = []
        self.mark("start")

    def mark(self, name: str) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append((name, event))
        else:
            self.marks.append((name, time.perf_counter()))

    def phases_ms(self) -> dict[str, float]:
        """Milliseconds per phase name (a name marked repeatedly accumulates)."""
        if self.cuda:
            torch.cuda.synchronize()
        totals: dict[str, float] = {}
        for (_, before), (name, after) in zip(self.marks, self.marks[1:], strict=False):
            elapsed = before.elapsed_time(after) if self.cuda else (after - before) * 1000.0
            totals[name] = totals.get(name, 0.0) + elapsed
        return totals
