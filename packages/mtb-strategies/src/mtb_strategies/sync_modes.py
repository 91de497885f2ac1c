"""Gradient synchronisation under accumulation: requested vs resolved modes."""

import contextlib

from mtb.api import SYNC_MODES, ConfigError

USER_MODES = tuple(m for m in SYNC_MODES if m != "auto")


def resolve_sync_mode(requested: str, default: str, allowed: tuple[str, ...], strategy: str):
    """The mode a strategy will use for ``requested`` (``auto`` takes its default)."""
    resolved = default if requested == "auto" else requested
    if resolved not in allowed:
        raise ConfigError(
            "training.gradient_sync_mode",
            f"{requested!r} is not supported by strategy {strategy!r}; "
            f"allowed: {', '.join(['auto', *(a for a in allowed if a in USER_MODES)])}",
        )
    return resolved


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
