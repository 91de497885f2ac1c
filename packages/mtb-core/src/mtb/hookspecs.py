"""Every hook a plugin can implement.

Registration hooks receive a ``register`` callback (or the click group) so
core can validate each item, reject duplicate names and remember which plugin
provided it; a plugin whose registration hook raises is dropped with one
warning. Observer hooks are called on every rank (``mtb_run_end`` and
``mtb_checkpoint_saved`` on rank 0, which holds the assembled result and
publishes checkpoints); check ``context.rank`` to act on one rank.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # torch-free at run time: these modules are only named here
    import click

    from mtb.checkpoint.backend import CheckpointBackend
    from mtb.checkpoint.lifecycle import SaveRecord
    from mtb.context import RunContext
    from mtb.metric_logger import MetricLogger
    from mtb.metrics import StepMetrics
    from mtb.profiling.protocol import Profiler
    from mtb.reporting import Reporter
    from mtb.strategy import Strategy

hookspec = pluggy.HookspecMarker("mtb")
hookimpl = pluggy.HookimplMarker("mtb")


@hookspec
def mtb_register_strategies(register: "Callable[[Strategy], None]") -> None:
    """Register training strategies.

    Call ``register(strategy)`` once per :class:`mtb.strategy.Strategy`
    instance. A strategy whose optional dependency is missing still registers;
    it reports itself unavailable with an install hint.
    """


@hookspec
def mtb_register_checkpoint_backends(
    register: "Callable[[CheckpointBackend], None]",
) -> None:
    """Register checkpoint backends.

    Call ``register(backend)`` with a
    :class:`mtb.checkpoint.backend.CheckpointBackend`: it writes and reads one
    step's model and optimizer payload inside a directory that core's
    checkpoint lifecycle hands it.
    """


@hookspec
def mtb_register_profilers(register: "Callable[[Profiler], None]") -> None:
    """Register profilers.

    Call ``register(profiler)`` with an :class:`mtb.api.Profiler` (a Protocol): a
    ``name``, a ``description`` and ``session(context, directory)``: a context
    manager around one trial on one rank whose ``step()`` the trainer calls
    after every step, and which leaves the rank's trace at ``path`` and its
    analysis in ``summary`` (the shape :func:`mtb.api.analyse_trace` returns);
    rank 0 combines them.
    """


@hookspec
def mtb_register_reporters(register: "Callable[[Reporter], None]") -> None:
    """Register reporters.

    Call ``register(reporter)`` with a :class:`mtb.reporting.Reporter`: a name,
    a file suffix and ``render(documents) -> str`` over result documents.
    """


@hookspec
def mtb_register_data_sources(register: "Callable[[Any], None]") -> None:
    """Register data sources: where a run's tokens come from (``--data``, ``data.source``).

    Call ``register(source)`` with an object that has a ``name``, a ``description``,
    ``recognizes(value) -> bool`` (does ``--data VALUE`` name data of this kind; the
    first registered source that says yes serves it), ``check(config)`` (raise
    :class:`mtb.api.UsageError` naming ``data.source`` before launch) and
    ``sampler(config, context) -> mtb.api.GlobalBatch`` (the batches of one rank,
    deterministic in seed, step and global sample index).
    """


@hookspec
def mtb_register_metric_loggers(register: "Callable[[MetricLogger], None]") -> None:
    """Register metric loggers: where a run's step metrics go (``--log-to``, ``logging.to``).

    Call ``register(logger)`` with a :class:`mtb.api.MetricLogger`: a ``name``,
    a ``description``, optionally ``unavailable_reason()`` (its library is
    missing: the install hint) and ``open(run)``, called on rank 0 before the
    first step with a :class:`mtb.api.LoggerRun` (its own directory, the run's
    name, config and tags), which returns a :class:`mtb.api.MetricSession`.
    Core calls the session; one that raises is dropped with one warning.
    """


@hookspec
def mtb_register_commands(cli: "click.Group", pm: "pluggy.PluginManager") -> None:
    """Add click sub-commands to the ``mtb`` group passed as ``cli``.

    ``pm`` is the plugin manager the CLI is built from, for a command whose
    options depend on what is registered (``pm.registry("strategy")``).

    Import heavy dependencies inside the command body, never at module level:
    ``mtb --help`` must stay fast and must not import torch.
    """


@hookspec
def mtb_trial_start(context: "RunContext") -> None:
    """A trial is about to start its first step on this rank.

    Called once per trial on every rank (``mtb_run_end``, by contrast, once
    per run on rank 0). ``context`` is the :class:`mtb.context.RunContext`
    (config, rank, world size, device, trial index).
    """


@hookspec
def mtb_step_end(context: "RunContext", metrics: "StepMetrics") -> None:
    """A training step finished on this rank.

    ``metrics`` is a :class:`mtb.metrics.StepMetrics` with this rank's timings,
    loss and whether the step was a warmup step.
    """


@hookspec
def mtb_checkpoint_saved(context: "RunContext", checkpoint: "SaveRecord") -> None:
    """A checkpoint was published; ``checkpoint`` is its SaveRecord (step, path, bytes).

    Called on rank 0, which publishes; with async saves on the background
    writer thread.
    """


@hookspec
def mtb_run_end(context: "RunContext", result: dict[str, Any]) -> None:
    """A run finished; ``result`` is the result document (a dict).

    Called on rank 0 only, after the result has been written: an
    implementation that raises cannot lose it (the run then exits 1 saying so).
    """
