"""What a worker knows about itself while it runs: config, ranks, device."""

from typing import TYPE_CHECKING, Any

import attrs

from mtb.config import RunConfig
from mtb.layout import Layout

if TYPE_CHECKING:
    import torch


@attrs.define
class RunContext:
    """Passed to strategies and observer hooks; one per worker process."""

    config: RunConfig
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    device: "torch.device | None" = None  # a type only: this module needs no torch
    backend: str | None = None
    trial: int = 0
    #: the current trial's engine, for observers that inspect the model
    engine: object = None
    #: calls the observer hooks and keeps what failed in them (mtb.observers.Observers)
    observers: Any = None

    @property
    def distributed(self) -> bool:
        """True when a process group is initialised (even with one rank)."""
        return self.backend is not None

    @property
    def layout(self) -> Layout:
        """The run's parallel layout on this world (checked before launch)."""
        return Layout.of(self.config, self.world_size)

    @property
    def dp_rank(self) -> int:
        """Data-parallel rank: tensor- and pipeline-parallel peers share it and their batches."""
        return self.layout.dp_rank(self.rank)

    @property
    def dp_world_size(self) -> int:
        return self.layout.dp

    @property
    def is_main(self) -> bool:
        return self.rank == 0
