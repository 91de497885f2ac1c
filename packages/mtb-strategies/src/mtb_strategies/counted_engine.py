"""An engine base that reports the gradient synchronisations its strategy counted."""

from mtb.api import Engine
from mtb_strategies.sync_modes import SyncCounter


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
