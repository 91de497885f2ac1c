"""What core calls on a metric logger: the contract a registered logger fulfils.

Core opens one session per run, on rank 0 only, before the first step; it
hands the session every step's metrics (warmup steps included, flagged) and,
after the result is written, the run's summary and provenance. Names are
slash-grouped (``train/loss``, ``time/step_ms``); units live in the names.
"""

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

import attrs

#: a hyperparameter's value: what every logger's parameter table can hold
Scalar = str | int | float | bool | None


@attrs.frozen
class LoggerRun:
    """What a logger needs to start: its own directory and what identifies the run."""

    #: this logger's folder inside ``logging.dir``; the logger may create it
    directory: Path
    #: the result file's name without ``.json``: the run's name in every logger
    name: str
    #: the run's config, flattened to dotted keys (``training.lr``)
    params: Mapping[str, Scalar]
    #: short labels known at start (strategy, preset, world size, config fingerprint)
    tags: Mapping[str, str]


@runtime_checkable
class MetricSession(Protocol):
    """One run's connection to a logger, opened by :meth:`MetricLogger.open`."""

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def finish(self, summary: Mapping[str, float], tags: Mapping[str, str]) -> None: ...


@runtime_checkable
class MetricLogger(Protocol):
    """A registered metric logger: a name, a description and a session per run."""

    name: str
    description: str

    def open(self, run: LoggerRun) -> MetricSession: ...
