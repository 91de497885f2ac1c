"""Named items that plugins register (strategies, reporters, ...).

Each registration hook implementation is called on its own so every item is
attributed to the plugin that registered it; duplicate names are rejected
with a message naming both plugins.
"""

import re
from collections.abc import Callable, Iterator

import attrs

from mtb.errors import PluginError, UsageError

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@attrs.frozen
class Kind:
    """One family of registrable items and the hook that registers them."""

    name: str
    label: str
    hook: str


KINDS = {
    "strategy": Kind("strategy", "strategies", "mtb_register_strategies"),
    "checkpoint_backend": Kind(
        "checkpoint_backend", "checkpoint backends", "mtb_register_checkpoint_backends"
    ),
    "profiler": Kind("profiler", "profilers", "mtb_register_profilers"),
    "reporter": Kind("reporter", "reporters", "mtb_register_reporters"),
}


@attrs.frozen
class Registered:
    """An item together with the plugin that registered it."""

    name: str
    item: object
    plugin: str

    @property
    def unavailable_reason(self) -> str | None:
        """None when usable; otherwise why not and how to install what is missing."""
        check = getattr(self.item, "unavailable_reason", None)
        return check() if callable(check) else None


@attrs.define
class Registry:
    """The items of one kind, by name, in registration order."""

    kind: Kind
    items: dict[str, Registered] = attrs.Factory(dict)

    def add(self, item: object, plugin: str) -> None:
        name = getattr(item, "name", None)
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise PluginError(
                f"plugin {plugin!r} registered a {self.kind.name} with invalid name {name!r}; "
                "names are lower-case letters, digits, '.', '_' or '-'"
            )
        if name in self.items:
            first = self.items[name].plugin
            raise PluginError(
                f"{self.kind.name} {name!r} is registered by both {first!r} and {plugin!r}; "
                "uninstall one or exclude it with MTB_LOAD_PLUGINS"
            )
        self.items[name] = Registered(name, item, plugin)

    def __iter__(self) -> Iterator[Registered]:
        return iter(self.items.values())

    def names(self) -> list[str]:
        return list(self.items)

    def get(self, name: str) -> object:
        """The usable item called ``name``, or a one-line usage error."""
        entry = self.items.get(name)
        if entry is None:
            installed = ", ".join(self.names()) or "none"
            raise UsageError(f"unknown {self.kind.name} {name!r}; installed: {installed}")
        reason = entry.unavailable_reason
        if reason:
            raise UsageError(f"{self.kind.name} {name!r} is unavailable: {reason}")
        return entry.item


def call_with(impl, **available):
    """One hook implementation called with the arguments it names, out of ``available``."""
    return impl.function(*(available[arg] for arg in impl.argnames))


def _registering(registry: Registry, plugin: str) -> Callable[[object], None]:
    """The ``register`` callback handed to one plugin's hook implementation."""

    def register(item: object) -> None:
        registry.add(item, plugin)

    return register


def collect(pm, kind_name: str) -> Registry:
    """Call every implementation of the kind's hook and gather what it registers."""
    kind = KINDS[kind_name]
    registry = Registry(kind)
    for impl in getattr(pm.hook, kind.hook).get_hookimpls():
        call_with(impl, register=_registering(registry, impl.plugin_name))
    return registry
