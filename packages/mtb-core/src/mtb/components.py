"""Which plugin provided each component a run used, recorded in its result.

``plugins`` lists what was installed; ``components`` says which distribution
the strategy, checkpoint backend, profiler, reporters, data source and metric
loggers of a run came from, so an impostor ``ddp`` from another distribution shows.
"""

from mtb import data_sources, run_reports
from mtb.checkpoint.backend import backend_name

#: the reporter that writes every run's result file
RESULT_REPORTER = "json"


def origin(pm, kind: str, name: str) -> dict:
    """``name`` of ``kind`` with its plugin, distribution and version (None when unknown)."""
    entry = pm.registry(kind).items.get(name)
    info = pm.info(entry.plugin) if entry is not None else None
    return {
        "name": name,
        "plugin": entry.plugin if entry is not None else None,
        "distribution": info.distribution if info else None,
        "version": info.version if info else None,
    }


def reporters_used(config) -> list[str]:
    """The result file's reporter, then each of ``--report``'s, once."""
    return list(dict.fromkeys([RESULT_REPORTER, *run_reports.names(config)]))


def used(pm, config) -> dict[str, list[str]]:
    """The names of the items of each kind that ``config`` uses (an empty list: none)."""
    strategy = pm.registry("strategy").items.get(config.strategy)
    backend = backend_name(config, strategy.item if strategy else None)
    return {
        "strategy": [config.strategy],
        "checkpoint_backend": [backend] if config.checkpoint.enabled else [],
        "profiler": [config.profile.profiler] if config.profile.enabled else [],
        "reporter": reporters_used(config),
    }


def record(pm, config) -> dict:
    """The ``components`` block of a train or profile result for ``config``."""
    names = used(pm, config)

    def single(kind: str) -> dict | None:
        return origin(pm, kind, names[kind][0]) if names[kind] else None

    return {
        "strategy": single("strategy"),
        "checkpoint_backend": single("checkpoint_backend"),
        "profiler": single("profiler"),
        "reporters": [origin(pm, "reporter", name) for name in names["reporter"]],
        "data_source": data_source(pm, config),
        "metric_loggers": [origin(pm, "metric_logger", name) for name in config.logging.to],
    }


def data_source(pm, config) -> dict | None:
    """The data source ``--data`` resolved to (data sources take no options of their own,
    so ``used`` leaves them out); None when nothing serves the value."""
    name = data_sources.name_of(pm, config)
    return origin(pm, "data_source", name) if name else None
