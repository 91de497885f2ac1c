"""The plugin manager: built-ins and entry-point plugins loaded one way.

Core's own plugins are plain modules listed in ``DEFAULT_PLUGINS`` and
registered exactly like third-party ones, so both share one code path.
"""

import importlib
import os
from importlib.metadata import entry_points

import attrs
import pluggy

from mtb import hookspecs
from mtb.errors import PluginError, warn
from mtb.registry import Registry, collect

ENTRY_POINT_GROUP = "mtb"

DEFAULT_PLUGINS = (
    "mtb.strategies.single",
    "mtb.reporters.json_reporter",
    "mtb.checkpoint.dcp_backend",
    "mtb.profiling.torch_profiler",
)


@attrs.frozen
class PluginInfo:
    """Where a loaded plugin came from, for ``mtb plugins`` and provenance."""

    name: str
    distribution: str
    version: str
    builtin: bool


def _core_version() -> str:
    from mtb import __version__

    return __version__


def _allow_list() -> set[str] | None:
    """MTB_LOAD_PLUGINS=a,b limits entry-point plugins to those (empty: none)."""
    raw = os.environ.get("MTB_LOAD_PLUGINS")
    if raw is None:
        return None
    return {name.strip() for name in raw.split(",") if name.strip()}


def _strict() -> bool:
    return os.environ.get("MTB_STRICT_PLUGINS", "") not in ("", "0")


def _warn_skipped(name: str, error: BaseException) -> None:
    detail = str(error).splitlines()[0] if str(error) else ""
    message = f"plugin {name!r} failed to load, skipped: {type(error).__name__}: {detail}"
    if _strict():
        raise PluginError(message.replace(", skipped", ""))
    warn(message)


def _register_builtins(pm: pluggy.PluginManager, infos: dict[str, PluginInfo]) -> None:
    for module_name in DEFAULT_PLUGINS:
        module = importlib.import_module(module_name)
        pm.register(module, name=module_name)
        infos[module_name] = PluginInfo(module_name, "mtb-core", _core_version(), True)


def _register_entry_points(pm: pluggy.PluginManager, infos: dict[str, PluginInfo]) -> None:
    allowed = _allow_list()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if allowed is not None and ep.name not in allowed:
            continue
        if pm.get_plugin(ep.name) is not None:
            continue
        try:
            module = ep.load()
        except Exception as error:  # any import-time failure of a third party
            _warn_skipped(ep.name, error)
            continue
        pm.register(module, name=ep.name)
        dist = ep.dist
        infos[ep.name] = PluginInfo(
            ep.name, dist.name if dist else "unknown", dist.version if dist else "unknown", False
        )


def _register_modules(pm: pluggy.PluginManager, infos: dict[str, PluginInfo]) -> None:
    """MTB_PLUGIN_MODULES=a.b,c: importable modules registered as plugins.

    For plugins that are not packaged yet, and for tests whose plugins must
    also load in launched worker processes.
    """
    for module_name in filter(None, os.environ.get("MTB_PLUGIN_MODULES", "").split(",")):
        module_name = module_name.strip()
        if pm.get_plugin(module_name) is not None:
            continue
        try:
            module = importlib.import_module(module_name)
        except Exception as error:
            _warn_skipped(module_name, error)
            continue
        pm.register(module, name=module_name)
        infos[module_name] = PluginInfo(module_name, "unpackaged", "", False)


class MtbPluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers each plugin's distribution."""

    def __init__(self):
        super().__init__("mtb")
        self.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self._registries: dict[str, Registry] = {}

    def register(self, plugin, name=None):
        self._registries.clear()
        return super().register(plugin, name)

    def unregister(self, plugin=None, name=None):
        self._registries.clear()
        return super().unregister(plugin, name)

    def registry(self, kind: str) -> Registry:
        """Items of ``kind`` ("strategy", "reporter", ...), collected once and cached."""
        if kind not in self._registries:
            self._registries[kind] = collect(self, kind)
        return self._registries[kind]

    def info(self, plugin_name: str) -> PluginInfo:
        """Distribution metadata of a plugin; in-process plugins are 'unpackaged'."""
        return self.infos.get(plugin_name) or PluginInfo(plugin_name, "unpackaged", "", False)

    def plugin_infos(self) -> list[PluginInfo]:
        """Every registered plugin, in registration order."""
        return [self.info(name) for name, _ in self.list_name_plugin()]


def build_plugin_manager(load_entry_points: bool = True) -> MtbPluginManager:
    """A fresh plugin manager with core's built-ins and, by default, installed plugins."""
    pm = MtbPluginManager()
    _register_builtins(pm, pm.infos)
    if load_entry_points:
        _register_entry_points(pm, pm.infos)
        _register_modules(pm, pm.infos)
    return pm


_default_pm: MtbPluginManager | None = None


def get_plugin_manager() -> MtbPluginManager:
    """The process-wide plugin manager, built on first use."""
    global _default_pm
    if _default_pm is None:
        _default_pm = build_plugin_manager()
    return _default_pm
