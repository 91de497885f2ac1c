"""The options of the plugins a run uses, checked and completed before it starts.

Each kind's table (``[strategy_options]``, ``[reporter_options]``, ...) may
hold only options that the items of that kind in use declare; the stored
config then lists every one of them, defaults filled in, so the result
records exactly how each plugin was set.
"""

import attrs

from mtb import components, options


def _table(pm, kind: str, names: list[str], given: dict) -> dict:
    registry = pm.registry(kind)
    items = [registry.items[name].item for name in names if name in registry.items]
    noun = kind.replace("_", " ")
    if kind == "strategy" and items:  # a strategy may refine its own resolution
        return items[0].resolve_options(given)
    declared = dict.fromkeys(o for item in items for o in getattr(item, "options", ()))
    owner = f"{noun} {', '.join(map(repr, names))}" if names else f"any {noun} in use (none)"
    return options.resolve(declared, given, options.section(kind), owner)


def resolve(config, pm):
    """``config`` with each kind's options checked against the items in use and completed."""
    tables = {
        options.section(kind): _table(pm, kind, names, getattr(config, options.section(kind)))
        for kind, names in components.used(pm, config).items()
    }
    return attrs.evolve(config, **tables)
