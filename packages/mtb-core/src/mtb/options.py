"""Settings that plugins declare: each becomes a flag of ``mtb run`` and a TOML key.

Strategies, checkpoint backends, profilers and reporters list ``Option``s in
their ``options`` attribute (as pytest plugins add theirs in
``pytest_addoption``). The options of a kind live in one TOML table named
after it (``[strategy_options]``, ``[reporter_options]``, ...); one flag per
option name, so two plugins may share a name only by declaring it identically
within one kind. Torch-free: registering and listing stay cheap.
"""

import math
from typing import Any

import attrs

from mtb.errors import ConfigError

OPTION_TYPES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def section(kind: str) -> str:
    """The config table holding the options of ``kind``: ``strategy`` -> ``strategy_options``."""
    return f"{kind}_options"


@attrs.frozen
class Option:
    """A setting a plugin adds to ``mtb run`` (as ``--NAME``) and to its kind's TOML table.

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

    def coerce(self, value, where: str = "strategy_options"):
        """``value`` checked against the option's type and choices, or a ConfigError."""
        where = f"{where}.{self.name}"
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


def resolve(options, given: dict, where: str, owner: str) -> dict:
    """Every option in ``options``: given values checked, the rest defaulted.

    ``where`` is the TOML table; ``owner`` names what declares them
    ("strategy 'ddp'") for the error about a name none of them declares.
    """
    known = {option.name: option for option in options}
    for name in given:
        if name not in known:
            allowed = ", ".join(known) or "none"
            raise ConfigError(f"{where}.{name}", f"not an option of {owner}; allowed: {allowed}")
    return {
        name: option.coerce(given.get(name, option.default), where)
        for name, option in known.items()
    }
