"""Which plugin provided each component a run used, recorded in its result.

``plugins`` lists what was installed; ``components`` says which distribution
the strategy, checkpoint backend, profiler and reporters that produced the
numbers came from, so an impostor ``ddp`` from another distribution shows.
"""

from mtb import run_reports
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


def record(pm, config) -> dict:
    """The ``components`` block of a train or profile result for ``config``."""
    strategy = pm.registry("strategy").items.get(config.strategy)
    backend = backend_name(config, strategy.item if strategy else None)
    return {
        "strategy": origin(pm, "strategy", config.strategy),
        "checkpoint_backend": (
            origin(pm, "checkpoint_backend", backend) if config.checkpoint.enabled else None
        ),
        "profiler": (
            origin(pm, "profiler", config.profile.profiler) if config.profile.enabled else None
        ),
        "reporters": [
            origin(pm, "reporter", name)
            for name in dict.fromkeys([RESULT_REPORTER, *run_reports.names(config)])
        ],
    }
