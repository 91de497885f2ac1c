"""The strategy contract: what a plugin registers to train the workload its way.

This module stays free of torch so that registering (and listing) strategies
is cheap; ``setup`` is where a strategy imports what it needs.
"""

from importlib.util import find_spec
from typing import ClassVar

from mtb import options as options_mod
from mtb.errors import UsageError
from mtb.options import Option


def _importable(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (dotted names too)."""
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


#: a strategy's setting (the name strategies have always used for :class:`mtb.options.Option`)
StrategyOption = Option


class Strategy:
    """Base class for registered strategies; override ``setup``.

    Class attributes describe what the strategy needs so core can refuse an
    impossible run with one line before any process starts.
    """

    name: str = ""
    description: str = ""
    #: device types it can train on
    device_types: tuple[str, ...] = ("cpu", "cuda")
    #: precisions it supports per device type
    precisions: ClassVar[dict[str, tuple[str, ...]]] = {
        "cpu": ("fp32", "bf16"),
        "cuda": ("fp32", "bf16", "fp16"),
    }
    #: largest world size it can run at (None: any)
    max_world_size: int | None = None
    #: importable modules it needs beyond mtb-core, and how to install them
    requires: tuple[str, ...] = ()
    install_hint: str = ""
    #: settings this strategy adds to ``mtb run`` and ``[strategy_options]``
    options: ClassVar[tuple[StrategyOption, ...]] = ()
    #: layout dimensions beyond plain data parallelism it can take (see mtb.layout.MODEL_DIMS)
    parallel_dims: tuple[str, ...] = ()
    #: model states split across the data-parallel ranks (for the analytic estimate)
    sharded_states: tuple[str, ...] = ()

    def state_bytes_per_parameter(self, training) -> dict[str, int]:
        """Bytes per parameter of each model state before sharding.

        fp32 master parameters and gradients (autocast keeps them fp32), plus
        AdamW's two fp32 moments; SGD without momentum keeps no state.
        """
        optimizer = 8 if training.optimizer == "adamw" else 0
        return {"parameters": 4, "gradients": 4, "optimizer_state": optimizer}

    def state_bytes_estimate(self, parameters: int, world_size: int, training) -> dict:
        """Analytic model-state bytes held by one rank, to set beside the measured ones.

        ``parameters``: those one rank holds before data-parallel sharding (all
        of them, or a tensor/pipeline-parallel rank's share); ``world_size``:
        the ranks the sharded states split over (the layout's dp_shard: HSDP
        replicas hold the same shards).
        """
        estimate = {
            state: per_param * parameters // (world_size if state in self.sharded_states else 1)
            for state, per_param in self.state_bytes_per_parameter(training).items()
        }
        return {**estimate, "total": sum(estimate.values())}

    def resolve_options(self, given: dict) -> dict:
        """Every option of this strategy: given values checked, the rest defaulted."""
        return options_mod.resolve(
            self.options, given, "strategy_options", f"strategy {self.name!r}"
        )

    def unavailable_reason(self) -> str | None:
        """None when usable, else which modules are missing and the install hint."""
        missing = [module for module in self.requires if not _importable(module)]
        if not missing:
            return None
        hint = f"; install with: {self.install_hint}" if self.install_hint else ""
        return f"needs {', '.join(missing)}{hint}"

    def check(self, config, device_type: str) -> None:
        """Raise UsageError when this strategy cannot run ``config`` on ``device_type``."""
        world = config.launch.world_size
        if self.max_world_size is not None and world > self.max_world_size:
            raise UsageError(
                f"strategy {self.name!r} runs on at most {self.max_world_size} process(es), "
                f"got a world size of {world}; choose a distributed strategy"
            )
        if device_type not in self.device_types:
            raise UsageError(
                f"strategy {self.name!r} does not run on {device_type}; "
                f"supported: {', '.join(self.device_types)}"
            )
        allowed = self.precisions.get(device_type, ())
        if config.training.precision not in allowed:
            raise UsageError(
                f"training.precision: {config.training.precision!r} is not supported by "
                f"strategy {self.name!r} on {device_type}; allowed: {', '.join(allowed)}"
            )

    def check_layout(self, layout) -> None:
        """Refuse a layout dimension this strategy does not declare in ``parallel_dims``.

        Core calls it next to :meth:`check`, with the layout on the real world size.
        """
        for dim in layout.beyond_data_parallel():
            if dim not in self.parallel_dims:
                takes = ", ".join(self.parallel_dims) or "data parallelism only"
                raise UsageError(
                    f"parallel.{dim}: strategy {self.name!r} cannot take {dim} "
                    f"{getattr(layout, dim)} (it takes: {takes})"
                )

    def setup(self, model, make_optimizer, context):
        """Wrap ``model``, build its optimizer and return an :class:`mtb.engine.Engine`.

        The contract's one required method: every strategy overrides it.
        """
        raise NotImplementedError(f"strategy {self.name!r} does not implement setup()")
