"""Every hook a plugin can implement.

Registration hooks receive a ``register`` callback (or the click group) so
core can validate each item, reject duplicate names and remember which plugin
provided it. Observer hooks are called on every rank (``mtb_run_end`` and
``mtb_checkpoint_saved`` on rank 0, which holds the assembled result and
publishes checkpoints); check ``context.rank`` to act on one rank.
"""

import pluggy

hookspec = pluggy.HookspecMarker("mtb")
hookimpl = pluggy.HookimplMarker("mtb")


@hookspec
def mtb_register_strategies(register):
    """Register training strategies.

    Call ``register(strategy)`` once per :class:`mtb.strategy.Strategy`
    instance. A strategy whose optional dependency is missing still registers;
    it reports itself unavailable with an install hint.
    """


@hookspec
def mtb_register_checkpoint_backends(register):
    """Register checkpoint backends.

    Call ``register(backend)`` with a
    :class:`mtb.checkpoint.backend.CheckpointBackend`: it writes and reads one
    step's model and optimizer payload inside a directory that core's
    checkpoint lifecycle hands it.
    """


@hookspec
def mtb_register_profilers(register):
    """Register profilers.

    Call ``register(profiler)`` with an object that has a ``name`` and
    ``session(context, directory)``: a context manager around one trial on one
    rank whose ``step()`` the trainer calls after every step, and which leaves
    the rank's trace at ``path`` and its analysis in ``summary`` (the shape
    :func:`mtb.profiling.trace.analyse` returns); rank 0 combines them.
    """


@hookspec
def mtb_register_reporters(register):
    """Register reporters.

    Call ``register(reporter)`` with a :class:`mtb.reporting.Reporter`: a name,
    a file suffix and ``render(documents) -> str`` over result documents.
    """


@hookspec
def mtb_register_commands(cli):
    """Add click sub-commands to the ``mtb`` group passed as ``cli``.

    Import heavy dependencies inside the command body, never at module level:
    ``mtb --help`` must stay fast and must not import torch.
    """


@hookspec
def mtb_run_start(context):
    """A trial is about to start its first step.

    ``context`` is the :class:`mtb.context.RunContext` (config, rank, world
    size, device, trial index).
    """


@hookspec
def mtb_step_end(context, metrics):
    """A training step finished on this rank.

    ``metrics`` is a :class:`mtb.metrics.StepMetrics` with this rank's timings,
    loss and whether the step was a warmup step.
    """


@hookspec
def mtb_checkpoint_saved(context, checkpoint):
    """A checkpoint was published; ``checkpoint`` is its SaveRecord (step, path, bytes).

    Called on rank 0, which publishes; with async saves on the background
    writer thread.
    """


@hookspec
def mtb_run_end(context, result):
    """A run finished; ``result`` is the result document (a dict).

    Called on rank 0 only, after the result has been written: an
    implementation that raises cannot lose it (the run then exits 1 saying so).
    """
