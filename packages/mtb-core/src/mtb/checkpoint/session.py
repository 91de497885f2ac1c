"""The trainer's side of checkpointing: resume before the loop, saves after steps, digests.

Without ``--checkpoint-dir``/``--resume`` it does nothing beyond optional digests,
so the training loop reads the same either way. With ``checkpoint.save_on_signal`` the
ranks agree after every step whether any got SIGUSR1 (mtb.preemption); if one did, they
save that step and stop with errors.Preempted.
"""

from mtb import distributed, preemption
from mtb.checkpoint import state
from mtb.checkpoint.formats import FORMAT_VERSION
from mtb.checkpoint.lifecycle import Checkpointer, backend_for
from mtb.errors import Preempted


class CheckpointSession:
    """One trial's checkpoint work on this rank."""

    def __init__(self, context, strategy, pm, engine):
        self.context = context
        self.config = context.config
        self.engine = engine
        self.checkpointer = (
            Checkpointer(context, strategy, pm) if self.config.checkpoint.enabled else None
        )
        self.backend = (
            self.checkpointer.backend
            if self.checkpointer
            else backend_for(pm, self.config, strategy)
        )
        self.resumed = self.checkpointer.resume(engine) if self.checkpointer else None
        self.start_step = self.resumed.step if self.resumed else 0
        self.tokens_seen = self.resumed.tokens_seen if self.resumed else 0
        self.completed = self.start_step
        self.lr = self.resumed.last_lr if self.resumed else None
        self.loaded_digests = self.digests() if self.resumed else None
        if self.resumed and context.is_main:
            announce(self.resumed)
        if self.checkpointer and self.resumed and self.signalled():  # restarted after it
            self.checkpointer.close()
            raise Preempted(self.start_step)

    def current_state(self, completed: int) -> dict:
        return state.train_state(
            completed, self.tokens_seen, self.lr, self.config, self.context.dp_world_size
        )

    def digests(self) -> dict | None:
        if not self.config.checkpoint.record_digests:
            return None
        current = self.current_state(self.completed)
        return state.local_digests(self.engine, self.backend, current, state.capture_rng())

    def before_step(self, step: int) -> None:
        if self.checkpointer:
            self.checkpointer.maybe_kill(step, during_save=False)

    def after_step(self, completed: int, metrics) -> None:
        self.completed = completed
        self.lr = metrics.lr
        self.tokens_seen += metrics.tokens * self.context.dp_world_size
        if self.checkpointer and self.checkpointer.due(completed):
            self.checkpointer.save(self.engine, completed, self.current_state(completed))
        if completed < self.config.training.steps and self.signalled():
            self.stop(completed)

    def signalled(self) -> bool:
        """With save_on_signal, whether any rank got SIGUSR1 (every rank asks, in step)."""
        if not self.config.checkpoint.save_on_signal:
            return False
        return distributed.any_rank(self.context, preemption.REQUESTED.is_set())

    def stop(self, completed: int) -> None:
        """Save ``completed`` unless just saved, wait until it is published on every rank,
        and stop the run."""
        assert self.checkpointer is not None, "save_on_signal needs checkpoint.dir"
        saves = self.checkpointer.saves
        if not saves or saves[-1].step != completed:
            self.checkpointer.save(self.engine, completed, self.current_state(completed))
        self.checkpointer.close()
        distributed.barrier(self.context)  # rank 0 has published: no rank leaves before
        raise Preempted(completed)

    def finish(self) -> tuple[dict | None, dict | None]:
        """(this rank's checkpoint record, its final digests), after the last save is done."""
        if self.checkpointer is None:
            return None, self.digests()
        self.checkpointer.close()
        record = {
            **self.checkpointer.summary(),
            "resumed": self.resumed.document() if self.resumed else None,
            "start_step": self.start_step,
            "end_step": self.config.training.steps,
            "tokens_seen": self.tokens_seen,
            "loaded_digests": self.loaded_digests,
        }
        return record, self.digests()


def announce(resumed) -> None:
    """One line on stderr: which checkpoint, why, and whether the continuation is exact."""
    import sys

    exact = "exact"
    if resumed.lacks:
        exact = f"not exact: the checkpoint lacks {', '.join(resumed.lacks)}"
    elif resumed.changed:
        exact = f"not exact: {resumed.changed}"
    if resumed.upgraded_from is not None:
        exact = f"format {resumed.upgraded_from} upgraded to {FORMAT_VERSION}; {exact}"
    changes = f"; changed: {', '.join(resumed.allowed_changes)}" if resumed.allowed_changes else ""
    print(
        f"mtb: resuming at step {resumed.step} from {resumed.path} ({resumed.reason}; {exact}"
        f"{changes})",
        file=sys.stderr,
        flush=True,
    )
