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
    "data_source": Kind("data_source", "data sources", "mtb_register_data_sources"),
    "metric_logger": Kind("metric_logger", "metric loggers", "mtb_register_metric_loggers"),
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

    def add(self, item: object, plugin: str, describe: Callable[[str], str] = repr) -> None:
        """Add ``item`` for ``plugin``; ``describe`` names a plugin with its distribution."""
        name = getattr(item, "name", None)
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise PluginError(
                f"plugin {plugin!r} registered a {self.kind.name} with invalid name {name!r}; "
                "names are lower-case letters, digits, '.', '_' or '-'"
            )
        if name in self.items:
            first = self.items[name].plugin
            raise NameClash(
                f"{self.kind.name} {name!r} is registered by both {describe(first)} and "
                f"{describe(plugin)}; uninstall one or exclude it with MTB_DISABLE_PLUGINS",
                first,
                plugin,
            )
        self._check_options(name, item, plugin, describe)
        self.items[name] = Registered(name, item, plugin)

    def _check_options(self, name: str, item: object, plugin: str, describe) -> None:
        """Refuse an option name another item declares differently (one flag, one meaning)."""
        for other in self.items.values():
            theirs = {o.name: o for o in getattr(other.item, "options", ())}
            for option in getattr(item, "options", ()):
                if theirs.get(option.name, option) != option:
                    raise NameClash(
                        f"option {option.name!r} is declared differently by {self.kind.name} "
                        f"{other.name!r} of {describe(other.plugin)} and {self.kind.name} "
                        f"{name!r} of {describe(plugin)}; rename one",
                        other.plugin,
                        plugin,
                    )

    def discard(self, plugin: str) -> None:
        """Forget what ``plugin`` registered (its hook raised half way)."""
        self.items = {k: v for k, v in self.items.items() if v.plugin != plugin}

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


class NameClash(PluginError):
    """A plugin registered a name, or declared an option, that an earlier plugin holds."""

    def __init__(self, message: str, first: str, second: str):
        super().__init__(message)
        self.first, self.second = first, second

    def loser(self, pm) -> str:
        """The plugin to skip: the later one, unless only the earlier is not a built-in
        (a third-party implementation ordered first never evicts a built-in)."""
        if pm.info(self.second).builtin and not pm.info(self.first).builtin:
            return self.first
        return self.second


class Recollect(Exception):
    """A plugin whose items a registry already holds was dropped: collect the kind again."""


def call_with(impl, **available):
    """One hook implementation called with the arguments it names, out of ``available``."""
    return impl.function(*(available[arg] for arg in impl.argnames))


def call_each(pm, hook: str, arguments: Callable[[str], dict], undo: Callable[[str], None]):
    """Call each plugin's implementation of ``hook`` on its own.

    One that raises is undone (``undo(plugin)``) and its plugin dropped with
    one warning (``pm.drop``: fatal in strict mode), so one broken plugin
    never stops the others. A plugin whose name or option clashes with one
    registered before it (built-ins register first) is dropped the same way;
    a strict-mode refusal (PluginError) stops.
    """
    for impl in getattr(pm.hook, hook).get_hookimpls():
        if pm.get_plugin(impl.plugin_name) is None:  # dropped meanwhile, by a hook called here
            continue
        try:
            call_with(impl, **arguments(impl.plugin_name))
        except NameClash as clash:
            undo(impl.plugin_name)
            loser = clash.loser(pm)
            pm.drop(loser, hook, clash)
            if loser != impl.plugin_name:
                raise Recollect() from clash
        except PluginError:
            raise
        except Exception as error:
            undo(impl.plugin_name)
            pm.drop(impl.plugin_name, hook, error)


def _registering(registry: Registry, plugin: str, describe) -> Callable[[object], None]:
    """The ``register`` callback handed to one plugin's hook implementation."""

    def register(item: object) -> None:
        registry.add(item, plugin, describe)

    return register


def collect(pm, kind_name: str) -> Registry:
    """Call every implementation of the kind's hook and gather what it registers (again
    without a plugin dropped half way, each time one is: at most once per plugin)."""
    kind = KINDS[kind_name]
    while True:
        registry = Registry(kind)

        def arguments(plugin: str, registry: Registry = registry) -> dict:
            return {"register": _registering(registry, plugin, pm.describe)}

        try:
            call_each(pm, kind.hook, arguments, registry.discard)
        except Recollect:
            continue
        return registry


def declared_options(pm) -> dict[str, tuple[str, list[Registered]]]:
    """Each option name that registered items declare: its kind and the items declaring it.

    One name is one flag of ``mtb run``: items of one kind may share it only
    by declaring it identically (``Registry.add`` checks), items of two kinds
    never: the plugin of the second is dropped with one warning naming both
    (fatal in strict mode), and the options are gathered again without it.
    """
    while True:
        plugins = pm.list_name_plugin()
        try:
            declared = _gather_options(pm)
        except NameClash as clash:
            pm.drop(clash.loser(pm), "its options", clash)
            continue
        if pm.list_name_plugin() == plugins:  # no plugin dropped while the kinds were collected
            return declared


def _gather_options(pm) -> dict[str, tuple[str, list[Registered]]]:
    declared: dict[str, tuple[str, list[Registered]]] = {}
    for kind in KINDS:
        for entry in pm.registry(kind):
            for option in getattr(entry.item, "options", ()):
                first_kind, entries = declared.setdefault(option.name, (kind, []))
                if first_kind != kind:
                    first = entries[0]
                    raise NameClash(
                        f"option {option.name!r} is declared by {_noun(first_kind)} "
                        f"{first.name!r} of {pm.describe(first.plugin)} and by {_noun(kind)} "
                        f"{entry.name!r} of {pm.describe(entry.plugin)}; rename one",
                        first.plugin,
                        entry.plugin,
                    )
                if entry not in entries:
                    entries.append(entry)
    return declared


def _noun(kind: str) -> str:
    return kind.replace("_", " ")
