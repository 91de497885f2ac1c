"""Counting gradient synchronisations: what a strategy needs to report ``gradient_syncs``.

A strategy's communication hook calls :meth:`SyncCounter.issued` whenever it
sends gradients (a DDP comm hook, FSDP's reduce-scatter, a parameter average);
:class:`CountedSyncEngine` brackets each backward and reports, per optimizer
step, the micro-batches during which something was issued. Built-in ddp,
fsdp, nd and zero count this way, and so can a third-party strategy (both are
in :mod:`mtb.api`).
"""

import contextlib

from mtb.engine import Engine


class SyncCounter:
    """Counts micro-batches during which gradient collectives were actually issued.

    Strategies call :meth:`issued` from their communication hook; the engine
    brackets each backward with :meth:`begin` and :meth:`end`.
    """

    def __init__(self):
        self.calls = 0
        self._before = 0
        self.syncs = 0

    def issued(self) -> None:
        self.calls += 1

    def begin(self) -> None:
        self._before = self.calls

    def end(self) -> None:
        if self.calls > self._before:
            self.syncs += 1

    @contextlib.contextmanager
    def bracket(self):
        """:meth:`begin` and :meth:`end` around a backward (or a deferred reduction)."""
        self.begin()
        try:
            yield
        finally:
            self.end()

    def take(self) -> int:
        """Synchronisations since the last call (one optimizer step's worth)."""
        syncs, self.syncs = self.syncs, 0
        return syncs


class CountedSyncEngine(Engine):
    """Brackets each backward for the counter and reports syncs per optimizer step."""

    def __init__(self, model, optimizer, context, sync_mode: str, counter: SyncCounter):
        super().__init__(model, optimizer, context)
        self.sync_mode = sync_mode
        self.counter = counter

    def details(self) -> dict:
        requested = self.context.config.training.gradient_sync_mode
        return {"gradient_sync_mode": {"requested": requested, "resolved": self.sync_mode}}

    def backward(self, loss) -> None:
        with self.counter.bracket():
            super().backward(loss)

    def optimizer_step(self, max_grad_norm=None, grad_norm=None):
        info = super().optimizer_step(max_grad_norm, grad_norm)
        info.gradient_syncs = self.counter.take()
        return info
