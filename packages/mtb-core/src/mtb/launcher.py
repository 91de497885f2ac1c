"""``mtb run`` and ``mtb profile``: prepare, check, launch the workers, record a failure.

The run trains in this process for one rank of a strategy without a process
group, else in workers started by the launch layer (mtb.launch), which
bounds every launch by a deadline and turns a failed rank into one line.
When workers fail or time out this module leaves a result document with the
failure, so no run disappears without a trace.
"""

import contextlib
import functools
import json
import os
import sys
from pathlib import Path

import attrs

from mtb import (
    components,
    data_sources,
    gpu_guard,
    memory,
    metric_logging,
    output_paths,
    preemption,
    provenance,
    run_options,
    run_reports,
)
from mtb.checkpoint import lock as checkpoint_lock
from mtb.documents import default_output, document_provenance, plugin_list, write_result
from mtb.errors import Interrupted, RunFailed, UsageError, found_in, one_line, warn
from mtb.launch import LaunchTimeout, deadline, interruptible, spawn
from mtb.layout import Layout
from mtb.results import failure_document, failure_status


def with_output(config):
    """The config with its result path filled in (the launcher decides it once)."""
    return (
        config
        if config.output
        else attrs.evolve(config, output=default_output("run", config.strategy))
    )


def prepare(config, pm):
    """The config as it will run: result path and reports decided, plugin options resolved."""
    pm.registry("strategy").get(config.strategy)
    if config.profile.enabled:
        pm.registry("profiler").get(config.profile.profiler)
    metric_logging.check(config, pm)
    config = with_output(config)
    config = attrs.evolve(config, reports=run_reports.resolve(config, pm))
    return run_options.resolve(config, pm)


def preflight(config, pm) -> None:
    """Refuse an impossible run with one line before any worker starts."""
    from mtb.checkpoint import lifecycle
    from mtb.distributed import cpu_oversubscription, resolve_backend, resolve_device_type

    strategy = pm.registry("strategy").get(config.strategy)
    device_type = resolve_device_type(config.launch.device)
    resolve_backend(config.launch.backend, device_type)
    if device_type == "cpu" and (crowded := cpu_oversubscription(config.launch.nproc_per_node)):
        warn(crowded)
    strategy.check(config, device_type)
    data_sources.resolve(pm, config.data.source).check(config)
    strategy.check_layout(Layout.of(config))
    output_paths.check_run(config)
    run_reports.check(config, pm)
    lifecycle.preflight(config, pm, strategy)
    provenance.check_evidence(config.evidence, provenance.allowed_registries(config.allow_registry))
    os.environ.pop(gpu_guard.RECORD_VARIABLE, None)
    if device_type == "cuda":
        gpu_guard.check()


def file_stamp(path) -> tuple | None:
    """What tells a file apart from its replacement (an atomic write is a new inode)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


def record_failure(config, pm, before: tuple | None, status: str, message: str) -> None:
    """Leave a failed-run document at the result path unless a worker of this run wrote an
    ok one (``before``: the path's ``file_stamp`` at the start; an earlier run's ok result,
    under --overwrite, is replaced).

    Under torchrun only rank 0 writes it, as it would have written the result.
    """
    if os.environ.get("RANK", "0") != "0":
        return
    path = Path(config.output)
    written = path.exists() and file_stamp(path) != before
    if written and json.loads(path.read_text()).get("status") == "ok":
        return
    plugins = plugin_list(pm)
    allowed = provenance.allowed_registries(config.allow_registry)
    prov = document_provenance(plugins, allowed)
    used = components.record(pm, config)
    document = failure_document(status, message, config, plugins, prov, used)
    write_result(pm, document, str(path), config.overwrite)
    for failure in run_reports.render(pm, document, config):
        print(f"mtb: {failure}", file=sys.stderr, flush=True)


def announce(config) -> None:
    """One line on stderr saying what is about to run (rank 0 only under torchrun)."""
    from mtb.model import parameter_count

    if os.environ.get("RANK", "0") != "0":
        return
    command = f"mtb profile ({config.profile.profiler})" if config.profile.enabled else "mtb run"
    print(
        f"{command}: strategy {config.strategy}, preset {config.preset}, "
        f"{parameter_count(config.model) / 1e6:,.2f}M parameters, "
        f"world size {os.environ.get('WORLD_SIZE', config.launch.world_size)}",
        file=sys.stderr,
    )


def _run(config, pm) -> dict | None:
    """In this process (a torchrun worker, or one rank of a strategy without a process
    group) under the deadline, else spawned: ddp or fsdp on one rank still get a group."""
    from mtb import worker
    from mtb.distributed import launched_by_torchrun

    groupless = pm.registry("strategy").get(config.strategy).max_world_size == 1
    if launched_by_torchrun() or (config.launch.world_size == 1 and groupless):
        with deadline(config.launch.timeout_s):
            return worker.run(config, pm)
    spawn(config)
    if config.launch.node_rank > 0:
        return None  # global rank 0, on node 0, wrote the result
    return json.loads(Path(config.output).read_text())


def launch(config, pm) -> dict | None:
    """Run ``config``; a failure leaves a failure document and raises RunFailed.

    Once the run has started, every failure is one (exit 1), whatever the
    strategy, and a signal that stops it is Interrupted (exit 128 + N); with
    checkpoint.save_on_signal, SIGUSR1 is Preempted after a save (exit 138).
    """
    from mtb.distributed import launched_by_torchrun

    memory.apply(config.launch)  # inherited by every worker started below
    config = prepare(config, pm)
    torchrun = launched_by_torchrun()
    if not torchrun:
        preflight(config, pm)
    announce(config)
    failed = functools.partial(record_failure, config, pm, file_stamp(config.output))
    try:
        # one writer per checkpoint directory; signals end the run with a failure document,
        # SIGUSR1 with save_on_signal after a save (mtb.preemption)
        with (
            checkpoint_lock.for_run(config),
            contextlib.nullcontext() if torchrun else interruptible(),
            preemption.forwarding(config.checkpoint.save_on_signal),
        ):
            return _run(config, pm)
    except LaunchTimeout as error:
        failed("timeout", str(error))
        raise RunFailed(str(error)) from None
    except checkpoint_lock.DirectoryBusy as error:
        if torchrun:  # the workers had started: leave a trace of the run
            failed("failed", str(error))
        raise
    except Interrupted as error:
        failed("failed", str(error))
        raise
    except Exception as error:
        # under torchrun nothing was checked before: its usage errors surface here
        if os.environ.get("MTB_DEBUG") or (torchrun and isinstance(error, UsageError)):
            raise
        stop = found_in(error, Interrupted)  # a signal that landed in code that wrapped it
        if stop is not None:
            failed("failed", str(stop))
            raise stop from None
        message = one_line(error)
        failed(failure_status(message), message)
        raise RunFailed(message) from None
