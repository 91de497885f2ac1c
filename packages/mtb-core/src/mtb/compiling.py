"""``--compile``: torch.compile per transformer block, and the time compilation takes.

Each block is compiled in place (``nn.Module.compile``), as torchtitan does:
the blocks share one structure, so one graph serves them all, and a wrapper
such as FSDP still sees the same ``Block`` modules and state-dict keys. The
compile happens before any strategy wraps the model (torchtitan: after
activation checkpointing, before FSDP).

Compilation is lazy: it runs inside the first forward and backward of a trial.
:class:`CompileTimer` adds up the wall time of every compilation event that
TorchDynamo reports (tracing a frame, a lazily compiled backward), so a step
can say how much of it was compiling and the result can report it apart.
"""

import time

from mtb.errors import RunFailed

#: torch.compile's backend for each block, and whole graphs only (a graph break is an error)
BACKEND = "inductor"
FULLGRAPH = True


def compile_blocks(model) -> None:
    """Compile each transformer block of ``model`` in place."""
    for block in model.blocks:
        block.compile(backend=BACKEND, fullgraph=FULLGRAPH)


class CompileTimer:
    """Wall seconds spent compiling since :meth:`take` was last called.

    Registered with TorchDynamo's compilation callbacks (start and end of each
    compilation, nested ones counted once) for as long as it is open; a
    disabled timer (an eager run) registers nothing and always reads 0.
    """

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.seconds = 0.0
        self.started = 0.0
        #: open compilations: older torch releases report nested ones too
        self.depth = 0

    def __enter__(self) -> "CompileTimer":
        if not self.enabled:
            return self
        from torch._dynamo.callback import callback_handler

        callback_handler.register_start_callback(self._start)
        callback_handler.register_end_callback(self._end)
        return self

    def __exit__(self, *exc) -> None:
        if not self.enabled:
            return
        from torch._dynamo.callback import callback_handler

        callback_handler.remove_start_callback(self._start)
        callback_handler.remove_end_callback(self._end)

    def _start(self, *args) -> None:  # newer torch passes a CallbackArgs, older ones nothing
        if self.depth == 0:
            self.started = time.perf_counter()
        self.depth += 1

    def _end(self, *args) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.seconds += time.perf_counter() - self.started

    def take(self) -> float:
        """Milliseconds compiled since the last call (the time of one step's compilations)."""
        spent, self.seconds = self.seconds, 0.0
        return spent * 1000.0


def provenance() -> dict:
    """How the run compiled, for the result's environment."""
    return {"scope": "each transformer block", "backend": BACKEND, "fullgraph": FULLGRAPH}


def check_measured(steps) -> None:
    """Refuse a trial whose measured steps compiled: their times would include compiling."""
    compiled = [s.step for s in steps if not s.warmup and s.compile_ms > 0]
    if compiled:
        raise RunFailed(
            f"torch.compile compiled during measured step {compiled[0]}: raise "
            "training.warmup_steps (--warmup-steps) so that compiling ends within the warmup"
        )
