"""The plugin manager: built-ins and entry-point plugins loaded one way.

Core's own plugins are plain modules listed in ``DEFAULT_PLUGINS`` and
registered exactly like third-party ones, so both share one code path.
"""

import difflib
import importlib
import os
from importlib.metadata import entry_points

import attrs
import pluggy

from mtb import errors, hookspecs
from mtb.errors import PluginError
from mtb.registry import KINDS, NameClash, Registry, collect, declared_options

ENTRY_POINT_GROUP = "mtb"

DEFAULT_PLUGINS = (
    "mtb.strategies.single",
    "mtb.reporters.json_reporter",
    "mtb.checkpoint.dcp_backend",
    "mtb.profiling.torch_profiler",
    "mtb.data_sources",
    "mtb.cli.commands",
)


@attrs.frozen
class PluginInfo:
    """Where a loaded plugin came from, for ``mtb plugins`` and provenance."""

    name: str
    distribution: str
    version: str
    builtin: bool


@attrs.frozen
class PluginFailure:
    """A plugin that is not in use, and why: ``mtb plugins`` lists these too.

    ``status`` is ``failed`` (its import or a registration hook raised),
    ``disabled`` (named in MTB_DISABLE_PLUGINS) or ``skipped`` (its name was
    already taken by another distribution's plugin).
    """

    info: PluginInfo
    status: str
    reason: str


#: hooks that were renamed, so that a plugin still using the old name is told the new one
RENAMED_HOOKS = {"mtb_run_start": "mtb_trial_start"}


def _core_version() -> str:
    from mtb import __version__

    return __version__


def _names(variable: str) -> list[str] | None:
    """The comma-separated names in ``variable``, in order; None when it is not set."""
    raw = os.environ.get(variable)
    if raw is None:
        return None
    return list(dict.fromkeys(name.strip() for name in raw.split(",") if name.strip()))


def _allow_list() -> set[str] | None:
    """MTB_LOAD_PLUGINS=a,b limits entry-point plugins to those (empty: none)."""
    names = _names("MTB_LOAD_PLUGINS")
    return None if names is None else set(names)


def disabled_plugins() -> set[str]:
    """MTB_DISABLE_PLUGINS=a,b: plugins (built-ins included) that are never imported."""
    return set(_names("MTB_DISABLE_PLUGINS") or ())


def _strict() -> bool:
    return os.environ.get("MTB_STRICT_PLUGINS", "") not in ("", "0")


def warn(message: str) -> None:
    """One warning line on stderr; in strict mode (MTB_STRICT_PLUGINS=1) an error instead.

    Said once per run: a worker of mtb's launcher, which loaded the same plugins and
    warned before starting it, stays quiet, and of ``torchrun -m mtb``'s workers only
    rank 0 speaks.
    """
    if _strict():
        raise PluginError(message.replace(", skipped", ""))
    if _said_elsewhere():
        return
    errors.warn(message)


def _said_elsewhere() -> bool:
    """Whether the launcher, or rank 0, gives this process's plugin warnings."""
    from mtb.lifeline import LAUNCHER_VARIABLE

    launcher = os.environ.get(LAUNCHER_VARIABLE)
    if launcher is not None and launcher != str(os.getpid()):  # the launcher sets it for itself
        return True
    return os.environ.get("RANK", "0") != "0"


def _load(pm: "MtbPluginManager", name: str, info: PluginInfo, load) -> None:
    """Import one plugin and register it; an import failure is one warning (strict: error)."""
    if pm.get_plugin(name) is not None:
        pm.fail(
            name,
            "skipped",
            f"from distribution {info.distribution!r} {info.version} is skipped: "
            f"the name is taken by {pm.describe(name)}; uninstall one of them",
            info,
        )
        return
    try:
        pm.register(load(), name=name)
    except PluginError:
        raise
    except Exception as error:  # an import-time failure, or a hook pluggy refused
        if pm.get_plugin(name) is not None:  # pluggy may have registered some hooks
            pm.unregister(name=name)
        pm.fail(name, "failed", f"failed to load, skipped: {errors.one_line(error)}", info)
        return
    pm.infos[name] = info


def _is_disabled(pm: "MtbPluginManager", info: PluginInfo, disabled: set[str]) -> bool:
    """Whether MTB_DISABLE_PLUGINS names this plugin; if so it is listed as disabled."""
    if info.name in disabled:
        pm.fail(info.name, "disabled", "disabled by MTB_DISABLE_PLUGINS", info)
    return info.name in disabled


def _register_builtins(pm: "MtbPluginManager", disabled: set[str]) -> None:
    for module_name in DEFAULT_PLUGINS:
        info = PluginInfo(module_name, "mtb-core", _core_version(), True)
        if _is_disabled(pm, info, disabled):
            continue
        pm.register(importlib.import_module(module_name), name=module_name)
        pm.infos[module_name] = info


def _warn_unknown_allowed(allowed: set[str] | None, installed: list[str]) -> None:
    """MTB_LOAD_PLUGINS naming no installed plugin loads nothing for it: say so."""
    unknown = sorted((allowed or set()) - set(installed))
    if unknown:
        warn(
            f"MTB_LOAD_PLUGINS: no installed plugin is named {', '.join(map(repr, unknown))} "
            f"(installed: {', '.join(sorted(installed)) or 'none'})"
        )


def _register_entry_points(pm: "MtbPluginManager", disabled: set[str]) -> list[str]:
    """Load the ``mtb`` entry points; returns every name seen (for the disable-list check)."""
    allowed = _allow_list()
    found = entry_points(group=ENTRY_POINT_GROUP)
    seen = [ep.name for ep in found]
    _warn_unknown_allowed(allowed, seen)
    for ep in found:
        if allowed is not None and ep.name not in allowed:
            continue
        dist = ep.dist
        info = PluginInfo(
            ep.name, dist.name if dist else "unknown", dist.version if dist else "unknown", False
        )
        if not _is_disabled(pm, info, disabled):
            _load(pm, ep.name, info, ep.load)
    return seen


def _register_modules(pm: "MtbPluginManager", disabled: set[str]) -> list[str]:
    """MTB_PLUGIN_MODULES=a.b,c: importable modules registered as plugins.

    For plugins that are not packaged yet, and for tests whose plugins must
    also load in launched worker processes.
    """
    names = _names("MTB_PLUGIN_MODULES") or []
    for module_name in names:
        info = PluginInfo(module_name, "unpackaged", "", False)
        if not _is_disabled(pm, info, disabled) and pm.get_plugin(module_name) is None:
            _load(pm, module_name, info, lambda m=module_name: importlib.import_module(m))
    return names


def check_disabled(disabled: set[str], known: list[str]) -> None:
    """Warn about names in MTB_DISABLE_PLUGINS that match no plugin (a typo disables nothing)."""
    for name in sorted(disabled - set(known)):
        warn(
            f"MTB_DISABLE_PLUGINS names unknown plugin {name!r}; "
            f"known plugins: {', '.join(sorted(set(known)))}"
        )


def _hint(hook: str) -> str:
    if hook in RENAMED_HOOKS:
        return f" (renamed to {RENAMED_HOOKS[hook]!r})"
    close = difflib.get_close_matches(hook, hookspec_names(), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def hookspec_names() -> list[str]:
    return [name for name in vars(hookspecs) if name.startswith("mtb_")]


class MtbPluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers each plugin's distribution and failures."""

    def __init__(self):
        super().__init__("mtb")
        self.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.failures: list[PluginFailure] = []
        self.warnings: dict[str, list[str]] = {}
        self._registries: dict[str, Registry] = {}

    def register(self, plugin, name=None):
        """Register ``plugin``; a hook implementation that matches no hookspec is reported."""
        self._registries.clear()
        name = super().register(plugin, name)
        for hook in self.unknown_hooks(plugin) if name is not None else ():
            problem = f"unknown hook {hook!r}{_hint(hook)}"
            self.warnings.setdefault(name, []).append(problem)
            try:
                warn(f"plugin {name!r} implements {problem}; it is never called")
            except PluginError:
                self.unregister(name=name)
                raise
        return name

    def unregister(self, plugin=None, name=None):
        self._registries.clear()
        return super().unregister(plugin, name)

    def unknown_hooks(self, plugin) -> list[str]:
        """Hooks ``plugin`` implements that no hookspec declares (pluggy's check_pending)."""
        return [
            caller.name
            for caller in self.get_hookcallers(plugin) or []
            if not caller.has_spec()
            and any(i.plugin is plugin and not i.optionalhook for i in caller.get_hookimpls())
        ]

    def fail(self, name: str, status: str, reason: str, info: PluginInfo | None = None) -> None:
        """Record a plugin that is not in use; ``failed`` and ``skipped`` also warn."""
        info = info or self.info(name)
        self.failures.append(PluginFailure(info, status, reason))
        if status != "disabled":
            warn(f"plugin {name!r} {reason}")

    def drop(self, name: str, hook: str, error: BaseException) -> None:
        """Unregister a plugin whose ``hook`` raised, or whose names clash with an earlier
        plugin's: one warning, fatal in strict mode."""
        info = self.info(name)
        if self.get_plugin(name) is not None:
            self.unregister(name=name)
        if isinstance(error, NameClash):
            self.fail(name, "skipped", f"is skipped: {error}", info)
        else:
            self.fail(name, "failed", f"failed in {hook}, skipped: {errors.one_line(error)}", info)

    def registry(self, kind: str) -> Registry:
        """Items of ``kind`` ("strategy", "reporter", ...), collected once and cached."""
        if kind not in self._registries:
            self._registries[kind] = collect(self, kind)
        return self._registries[kind]

    def registries(self) -> dict[str, Registry]:
        """Every kind, collected again after any plugin that failed in one was dropped."""
        for kind in KINDS:
            self.registry(kind)
        return {kind: self.registry(kind) for kind in KINDS}

    def settled(self) -> "MtbPluginManager":
        """Every kind collected and every option checked, as the ``mtb`` command did before
        launch: a launched worker then skips the plugins the command skipped (quietly,
        the command warned)."""
        self.registries()
        declared_options(self)
        return self

    def info(self, plugin_name: str) -> PluginInfo:
        """Distribution metadata of a plugin; in-process plugins are 'unpackaged'."""
        return self.infos.get(plugin_name) or PluginInfo(plugin_name, "unpackaged", "", False)

    def plugin_infos(self) -> list[PluginInfo]:
        """Every registered plugin, in registration order."""
        return [self.info(name) for name, _ in self.list_name_plugin()]

    def describe(self, name: str) -> str:
        """``name (distribution version)``, for messages that say what to uninstall."""
        info = self.info(name)
        return f"{name!r} ({' '.join(filter(None, (info.distribution, info.version)))})"


def build_plugin_manager(load_entry_points: bool = True) -> MtbPluginManager:
    """A fresh plugin manager with core's built-ins and, by default, installed plugins."""
    pm = MtbPluginManager()
    disabled = disabled_plugins()
    _register_builtins(pm, disabled)
    if load_entry_points:
        known = [*DEFAULT_PLUGINS, *_register_entry_points(pm, disabled)]
        known += _register_modules(pm, disabled)
        check_disabled(disabled, known)
    return pm


_default_pm: MtbPluginManager | None = None


def get_plugin_manager() -> MtbPluginManager:
    """The process-wide plugin manager, built on first use."""
    global _default_pm
    if _default_pm is None:
        _default_pm = build_plugin_manager()
    return _default_pm
