"""Start the workers of a run: in-process for one rank, torch's elastic launch for more.

Every launch has a wall-clock limit; when workers fail or time out the
launcher reports the failing rank on one line and leaves a result document
with the failure, so no run disappears without a trace.
"""

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import attrs

from mtb import components, gpu_guard, lifeline, memory, output_paths, provenance
from mtb import config as config_mod
from mtb.checkpoint import lock as checkpoint_lock
from mtb.documents import default_output, document_provenance, plugin_list, write_result
from mtb.errors import Interrupted, RunFailed, UsageError, one_line
from mtb.results import OOM_MARKERS, failure_document, failure_status


class LaunchTimeout(Exception):
    """The launch ran past launch.timeout_s."""


def with_output(config):
    """The config with its result path filled in (the launcher decides it once)."""
    return (
        config
        if config.output
        else attrs.evolve(config, output=default_output("run", config.strategy))
    )


def prepare(config, pm):
    """The config as it will run: result path decided, strategy options resolved."""
    strategy = pm.registry("strategy").get(config.strategy)
    options = strategy.resolve_options(config.strategy_options)
    if config.profile.enabled:
        pm.registry("profiler").get(config.profile.profiler)
    return attrs.evolve(with_output(config), strategy_options=options)


def preflight(config, pm) -> None:
    """Refuse an impossible run with one line before any worker starts."""
    from mtb.checkpoint import lifecycle
    from mtb.distributed import resolve_backend, resolve_device_type

    strategy = pm.registry("strategy").get(config.strategy)
    device_type = resolve_device_type(config.launch.device)
    resolve_backend(config.launch.backend, device_type)
    strategy.check(config, device_type)
    output_paths.check_run(config)
    lifecycle.preflight(config, pm, strategy)
    provenance.check_evidence(config.evidence, provenance.allowed_registries(config.allow_registry))
    os.environ.pop(gpu_guard.RECORD_VARIABLE, None)
    if device_type == "cuda":
        gpu_guard.check()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise LaunchTimeout in the main thread after ``seconds`` (SIGALRM)."""

    def expire(signum, frame):
        raise LaunchTimeout(f"launch exceeded launch.timeout_s={seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def interruptible():
    """Raise Interrupted in the main thread on SIGTERM, Ctrl-C or SIGHUP (unless ignored,
    as under nohup).

    torch's agent takes these signals over while workers run (it stops them
    with the same signal); :func:`_elastic` turns its exception into ours.
    """

    def stop(signum, frame):
        raise Interrupted(signum)

    previous = {signum: signal.getsignal(signum) for signum in lifeline.heeded()}
    for signum in previous:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wait_for_endpoint(endpoint: str, timeout_s: float) -> None:
    """Return once something listens at ``endpoint``; RunFailed naming it after ``timeout_s``.

    A node that does not host the rendezvous checks this before torch's
    rendezvous, whose store client retries inside C++ (deaf to our deadline,
    a stack trace per retry) for as long as its own timeout.
    """
    host, _, port = endpoint.rpartition(":")
    give_up = time.monotonic() + timeout_s
    while True:
        left = give_up - time.monotonic()
        try:
            with socket.create_connection((host, int(port)), timeout=max(0.1, min(2.0, left))):
                return
        except OSError as error:
            if time.monotonic() + 0.5 >= give_up:
                reason = error.strerror or type(error).__name__
                raise RunFailed(
                    f"launch.rdzv_endpoint: nothing answered at {endpoint} within "
                    f"{timeout_s:g} s ({reason}); start node 0 first and check the address"
                ) from None
            time.sleep(0.5)


def _quiet_elastic_logs() -> None:
    if os.environ.get("MTB_DEBUG"):
        return
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _elastic_config(launch, log_dir: str):
    """torch's elastic LaunchConfig from our ``[launch]`` settings."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    endpoint = launch.rdzv_endpoint or f"127.0.0.1:{_free_port()}"
    return LaunchConfig(
        min_nodes=launch.nnodes,
        max_nodes=launch.nnodes,
        nproc_per_node=launch.nproc_per_node,
        run_id=launch.rdzv_id,
        rdzv_backend="c10d",
        rdzv_endpoint=endpoint,
        rdzv_configs={
            "is_host": launch.node_rank == 0,
            "rank": launch.node_rank,
            "read_timeout": int(launch.timeout_s),  # the store client's wait, 60 s otherwise
        },
        local_addr=launch.local_addr or None,
        rdzv_timeout=int(launch.timeout_s),
        max_restarts=launch.max_restarts,
        monitor_interval=0.1,
        start_method="spawn",
        logs_specs=DefaultLogsSpecs(log_dir=log_dir),
    )


def _out_of_memory(failure) -> bool:
    return any(marker in (failure.message or "").lower() for marker in OOM_MARKERS)


def _stopped_by_agent(failure) -> bool:
    """Died by a signal the agent stops survivors with, and did not record it as another's."""
    forwarded = failure.exitcode in [-s for s in lifeline.FORWARDED]
    return forwarded and "signal" not in failure.error_file_data


def _root_failure(failures: dict) -> int:
    """The rank to blame: one killed by a signal, else one out of memory, else the earliest.

    Timestamps are whole seconds, so when one rank is killed or runs out of
    memory its peers' connection errors often tie with it; neither a signal
    nor an allocation failure is ever a peer's echo. The agent's own SIGTERM
    to the surviving ranks is: those come last (a worker records a signal
    that anyone else sent, see mtb.lifeline).
    """

    def rank_order(r):
        code = failures[r].exitcode
        stopped = _stopped_by_agent(failures[r])
        return (stopped, code >= 0, not _out_of_memory(failures[r]), failures[r].timestamp, r)

    return min(failures, key=rank_order)


def _failure_message(error) -> str:
    rank = _root_failure(error.failures)
    failure = error.failures[rank]
    message = failure.message or ""
    if not message or message.startswith("To enable traceback"):
        message = f"exit code {failure.exitcode}"
    return f"rank {rank} failed: {message.splitlines()[0]}"


def _elastic(launch, entrypoint, *args) -> dict:
    """Start ``entrypoint(*args)`` on every rank under the deadline; rank -> return value.

    As torchrun does, workers get OMP_NUM_THREADS = cores / processes unless
    the user set it; a failed worker becomes one RunFailed line naming its rank, a
    signal to this process Interrupted. Workers die with this process (mtb.lifeline).
    """
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    os.environ.setdefault(provenance.COMMAND_LINE_VARIABLE, provenance.command_line())
    threads = max(1, (os.cpu_count() or 1) // launch.nproc_per_node)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    # the shared rendezvous store keeps a failed attempt's keys (no per-attempt prefix), so
    # restarted gloo workers could read dead peers' addresses: a fresh store per attempt
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    os.environ[lifeline.LAUNCHER_VARIABLE] = str(os.getpid())
    if launch.nnodes > 1 and launch.node_rank > 0:
        wait_for_endpoint(launch.rdzv_endpoint, launch.timeout_s)
    with tempfile.TemporaryDirectory(prefix="mtb-launch-") as tmp:
        launch_config = _elastic_config(launch, str(Path(tmp) / "logs"))
        _quiet_elastic_logs()
        try:
            with deadline(launch.timeout_s), interruptible():
                return elastic_launch(launch_config, entrypoint)(*args)
        except ChildFailedError as error:
            raise RunFailed(_failure_message(error)) from None
        except SignalException as error:
            raise Interrupted(error.sigval) from None


def spawn(config, module: str = "mtb.worker", *args: str) -> None:
    """Run ``python -m MODULE CONFIG.json ARGS`` workers through torch's elastic launch API.

    Each starts through mtb.lifeline, which ties it to this process first.
    """
    with tempfile.TemporaryDirectory(prefix="mtb-config-") as tmp:
        config_path = Path(tmp) / "config.json"
        config_path.write_text(json.dumps(config_mod.to_dict(config)))
        command = ("-m", "mtb.lifeline", module, str(config_path), *args)
        _elastic(config.launch, sys.executable, *command)


def _call_recording_errors(function, *args):
    """A launched worker: ``function(*args)``, or one line for the agent and exit 1.

    It dies with the launcher; its signals are not taken (torch is imported by now).
    """
    from mtb.worker import record_error

    lifeline.die_with(lifeline.launcher_pid())
    try:
        return function(*args)
    except Exception as error:
        if os.environ.get("MTB_DEBUG"):
            raise
        record_error(error)
        sys.exit(1)


def run_function(launch, function, *args):
    """``function(*args)`` on every rank of ``launch`` (a LaunchConfig); rank 0's return value.

    For commands whose workers are a picklable function rather than a
    training run: the same elastic launch, rendezvous, deadline, thread
    defaults and one-line failures as ``mtb run``. Under torchrun the
    function runs in this process. Raises LaunchTimeout past
    ``launch.timeout_s`` and RunFailed when a worker fails.
    """
    from mtb.distributed import launched_by_torchrun

    memory.apply(launch)
    if launched_by_torchrun():
        with deadline(launch.timeout_s):
            return function(*args)
    return _elastic(launch, _call_recording_errors, function, *args).get(0)


def record_failure(config, pm, status: str, message: str) -> None:
    """Leave a failed-run document at the result path unless a worker wrote one.

    Under torchrun only rank 0 writes it, as it would have written the result.
    """
    if os.environ.get("RANK", "0") != "0":
        return
    path = Path(config.output)
    if path.exists() and json.loads(path.read_text()).get("status") == "ok":
        return
    plugins = plugin_list(pm)
    allowed = provenance.allowed_registries(config.allow_registry)
    prov = document_provenance(plugins, allowed)
    used = components.record(pm, config)
    document = failure_document(status, message, config, plugins, prov, used)
    write_result(pm, document, str(path), config.overwrite)


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
    strategy, and a signal that stops it is Interrupted (exit 128 + N).
    """
    from mtb.distributed import launched_by_torchrun

    memory.apply(config.launch)  # inherited by every worker started below
    config = prepare(config, pm)
    torchrun = launched_by_torchrun()
    if not torchrun:
        preflight(config, pm)
    announce(config)
    try:
        # one writer per checkpoint directory; signals end the run with a failure document
        with (
            checkpoint_lock.for_run(config),
            contextlib.nullcontext() if torchrun else interruptible(),
        ):
            return _run(config, pm)
    except LaunchTimeout as error:
        record_failure(config, pm, "timeout", str(error))
        raise RunFailed(str(error)) from None
    except checkpoint_lock.DirectoryBusy as error:
        if torchrun:  # the workers had started: leave a trace of the run
            record_failure(config, pm, "failed", str(error))
        raise
    except Interrupted as error:
        record_failure(config, pm, "failed", str(error))
        raise
    except Exception as error:
        # under torchrun nothing was checked before: its usage errors surface here
        if os.environ.get("MTB_DEBUG") or (torchrun and isinstance(error, UsageError)):
            raise
        message = one_line(error)
        record_failure(config, pm, failure_status(message), message)
        raise RunFailed(message) from None
