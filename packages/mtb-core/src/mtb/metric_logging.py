"""The metric loggers a run selects (``logging.to``): checked before launch, fed on rank 0.

A logger is auxiliary to the result: one that fails to start, to write or to
finish is one warning line and is dropped, and the run goes on to write its
result and exit as it would have without it.
"""

import contextlib
import json
import math
import resource
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from mtb import config as config_mod
from mtb.errors import ConfigError, one_line, warn
from mtb.metric_logger import LoggerRun, MetricSession, Scalar
from mtb.results import PHASES

FIELD = "logging.to"
#: the longest text a parameter or tag carries (every logger's limits allow it)
TEXT_LIMIT = 5000


def check(config, pm) -> None:
    """Refuse an unknown or unavailable logger with one line naming ``logging.to``."""
    registry = pm.registry("metric_logger")
    for name in config.logging.to:
        entry = registry.items.get(name)
        if entry is None:
            installed = ", ".join(registry.names()) or "none (pip install mtb-loggers)"
            raise ConfigError(FIELD, f"unknown metric logger {name!r}; installed: {installed}")
        if entry.unavailable_reason:
            raise ConfigError(
                FIELD, f"metric logger {name!r} is unavailable: {entry.unavailable_reason}"
            )


def directory(config) -> Path:
    """``logging.dir``, else the result path without ``.json``, plus ``-logs``."""
    if config.logging.dir:
        return Path(config.logging.dir)
    output = Path(config.output)
    return output.with_name(f"{output.stem}-logs")


def flatten(doc: Mapping, prefix: str = "") -> dict[str, object]:
    """Nested tables as dotted keys; lists stay whole (each logger's tables are flat)."""
    flat: dict[str, object] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _scalar(value: object) -> Scalar:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:TEXT_LIMIT]


def params(config) -> dict[str, Scalar]:
    """The run's config as hyperparameters: dotted keys, lists as JSON text."""
    return {k: _scalar(v) for k, v in flatten(config_mod.to_dict(config)).items()}


def start_tags(context) -> dict[str, str]:
    config = context.config
    return {
        "strategy": config.strategy,
        "preset": config.preset,
        "world_size": str(context.world_size),
        "device": context.device.type,
        "config_fingerprint": config_mod.fingerprint(config),
    }


def end_tags(document: Mapping) -> dict[str, str]:
    """The result's status and provenance (dotted keys) as text."""
    flat = flatten({"status": document["status"], "provenance": document["provenance"]})
    return {k: str(_scalar(v)) for k, v in flat.items()}


def summary(document: Mapping) -> dict[str, float]:
    """The numbers of the result's summary (``summary/tokens_per_s/mean`` ...)."""
    flat = flatten(document["summary"], "summary/")
    return {
        key.replace(".", "/"): float(value)
        for key, value in flat.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }


def memory(device) -> dict[str, float]:
    """This process's memory now: peak RSS, and the CUDA allocator's figures on a GPU."""
    values = {"memory/peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if device.type == "cuda":
        import torch

        values["memory/cuda_allocated_bytes"] = torch.cuda.memory_allocated(device)
        values["memory/cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        values["memory/cuda_max_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    return {k: float(v) for k, v in values.items()}


def step_values(context, metrics) -> dict[str, float]:
    """One step as rank 0 saw it: its loss and times; lr and grad norm are every rank's.

    Tokens/s counts every data-parallel rank's batch over rank 0's step time.
    """
    tokens = metrics.tokens * context.dp_world_size
    values = {
        "train/loss": metrics.loss,
        "train/lr": metrics.lr,
        "train/tokens_per_s": tokens / (metrics.step_ms / 1000.0) if metrics.step_ms else 0.0,
        "train/warmup": float(metrics.warmup),
        "train/trial": float(context.trial),
        **{f"time/{phase}": getattr(metrics, phase) for phase in PHASES},
        **memory(context.device),
    }
    if metrics.grad_norm is not None:
        values["train/grad_norm"] = metrics.grad_norm
    return {k: float(v) for k, v in values.items()}


class RunLoggers:
    """The sessions of one run on rank 0 (none elsewhere); a session that raises is dropped.

    Steps are numbered across trials: a trial that starts again from step 0
    continues where the previous one stopped, so every logger sees one
    increasing series (``train/trial`` says which trial a point belongs to).
    """

    def __init__(self, sessions: dict[str, MetricSession]):
        self.sessions = sessions
        self.offset = 0
        self.last: int | None = None

    @classmethod
    def open(cls, context, pm) -> "RunLoggers":
        config = context.config
        if not context.is_main or not config.logging.to:
            return cls({})
        base = directory(config)
        run = LoggerRun(base, Path(config.output).stem, params(config), start_tags(context))
        registry = pm.registry("metric_logger")
        sessions = {}
        for name in config.logging.to:
            session = _open(name, registry.get(name), attrs.evolve(run, directory=base / name))
            if session is not None:
                sessions[name] = session
        return cls(sessions)

    def number(self, step: int) -> int:
        """``step`` on the run's one axis (see the class docstring)."""
        if self.last is not None and step + self.offset <= self.last:
            self.offset = self.last + 1 - step
        self.last = step + self.offset
        return self.last

    def step(self, context, metrics) -> None:
        if not self.sessions:
            return
        number, values = self.number(metrics.step), step_values(context, metrics)
        self._each("write", lambda session: session.log_metrics(number, values))

    def finish(self, document: Mapping | None) -> None:
        """End every session with the result's summary and provenance (None: the run failed)."""
        numbers = summary(document) if document else {}
        tags = end_tags(document) if document else {"status": "failed"}
        self._each("finish", lambda session: session.finish(numbers, tags))
        self.sessions.clear()

    def _each(self, action: str, call: Callable[[MetricSession], None]) -> None:
        for name, session in list(self.sessions.items()):
            try:
                call(session)
            except Exception as error:
                del self.sessions[name]
                _warn(name, action, error)


def _open(name: str, logger, run: LoggerRun) -> MetricSession | None:
    try:
        return logger.open(run)
    except Exception as error:
        _warn(name, "start", error)
        return None


def _warn(name: str, action: str, error: Exception) -> None:
    warn(f"metric logger {name!r} failed to {action}, not logging to it: {one_line(error)}")


@contextlib.contextmanager
def logging_run(context, pm):
    """The run's loggers; a run that raises ends their sessions as failed."""
    loggers = RunLoggers.open(context, pm)
    try:
        yield loggers
    except BaseException:
        loggers.finish(None)
        raise
