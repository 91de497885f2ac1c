"""The checkpoint-backend contract: one step's model and optimizer payload in a directory.

Core's lifecycle (mtb.checkpoint.lifecycle) owns everything else: the
temporary directory, RNG and train state, metadata.json, READY, ``latest``,
retention, resume selection and the compatibility check.
"""

from concurrent.futures import Future
from pathlib import Path
from typing import ClassVar


def backend_name(config, strategy) -> str:
    """The checkpoint backend a run uses: the configured one, or the strategy's own with auto."""
    name = config.checkpoint.backend
    return getattr(strategy, "checkpoint_backend", "dcp") if name == "auto" else name


class CheckpointBackend:
    """Base class of registered checkpoint backends; override save, load and optimizer_state."""

    name: str = ""
    description: str = ""
    #: None when a checkpoint loads at any world size; else why it cannot
    reshard_refusal: str | None = None
    #: settings it adds to ``mtb run`` and ``[checkpoint_backend_options]``
    #: (mtb.options.Option); their values reach it as context.config.checkpoint_backend_options
    options: ClassVar[tuple] = ()

    def supports(self, strategy) -> bool:
        """Whether this backend can save and load the engines of ``strategy``."""
        return True

    def save(
        self, engine, directory: Path, context, asynchronous: bool = False, group=None
    ) -> Future | None:
        """Write the payload under ``directory`` (every rank calls it).

        ``asynchronous``: stage the state and return a future that completes
        when the write is done; ``group`` is the process group to use for it
        (None without a process group). A backend that cannot write in the
        background writes synchronously and returns None.
        """
        raise NotImplementedError(f"checkpoint backend {self.name!r} does not implement save()")

    def load(self, engine, directory: Path, context) -> None:
        """Load the payload under ``directory`` into ``engine`` (every rank calls it)."""
        raise NotImplementedError(f"checkpoint backend {self.name!r} does not implement load()")

    def optimizer_state(self, engine) -> dict:
        """This rank's optimizer state as nested tensors, for digests."""
        raise NotImplementedError(
            f"checkpoint backend {self.name!r} does not implement optimizer_state()"
        )
