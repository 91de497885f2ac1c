"""The strategy contract: what a plugin registers to train the workload its way.

This module stays free of torch so that registering (and listing) strategies
is cheap; ``setup`` is where a strategy imports what it needs.
"""

import math
from importlib.util import find_spec
from typing import Any, ClassVar

import attrs

from mtb.errors import ConfigError, UsageError

OPTION_TYPES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _importable(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (dotted names too)."""
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


@attrs.frozen
class StrategyOption:
    """A setting a strategy adds to ``mtb run`` (as ``--NAME``) and to ``[strategy_options]``.

    ``type`` is bool, int, float or str; a bool becomes a ``--NAME/--no-NAME`` flag.
    """

    name: str
    type: type
    default: Any
    help: str
    unit: str = ""
    choices: tuple = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def coerce(self, value):
        """``value`` checked against the option's type and choices, or a ConfigError."""
        where = f"strategy_options.{self.name}"
        if value is None:
            return None
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) != (self.type is bool) or not isinstance(value, self.type):
            raise ConfigError(where, f"expected {OPTION_TYPES[self.type]}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(where, f"must be a finite number, got {value}")
        if self.choices and value not in self.choices:
            allowed = ", ".join(map(str, self.choices))
            raise ConfigError(where, f"{value!r} is not one of: {allowed}")
        return value


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
        """Analytic model-state bytes held by one rank, to set beside the measured ones."""
        estimate = {
            state: per_param * parameters // (world_size if state in self.sharded_states else 1)
            for state, per_param in self.state_bytes_per_parameter(training).items()
        }
        return {**estimate, "total": sum(estimate.values())}

    def resolve_options(self, given: dict) -> dict:
        """Every option of this strategy: given values checked, the rest defaulted."""
        known = {option.name: option for option in self.options}
        for name in given:
            if name not in known:
                allowed = ", ".join(known) or "none"
                raise ConfigError(
                    f"strategy_options.{name}",
                    f"not an option of strategy {self.name!r}; its options: {allowed}",
                )
        return {
            name: option.coerce(given.get(name, option.default)) for name, option in known.items()
        }

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

    def setup(self, model, make_optimizer, context):
        """Wrap ``model``, build its optimizer and return an :class:`mtb.engine.Engine`.

        The contract's one required method: every strategy overrides it.
        """
        raise NotImplementedError(f"strategy {self.name!r} does not implement setup()")
