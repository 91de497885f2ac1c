"""The launch layer: worker processes, rendezvous, deadlines and one-line failures.

Generic to every command that starts workers: ``mtb run`` (mtb.launcher),
doctor, checkpoint verify, comm and megatron. torch's elastic agent starts
the ranks (:func:`spawn` for a worker module, :func:`run_function` for a
picklable function); every launch has a wall-clock deadline, a failed rank
becomes one RunFailed line naming it, and workers die with their launcher
(mtb.lifeline). Nothing here knows about training or results.
"""

import contextlib
import faulthandler
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from mtb import config as config_mod
from mtb import lifeline, memory, provenance
from mtb.errors import Interrupted, PluginsFailed, Preempted, RunFailed, one_line
from mtb.results import OOM_MARKERS


class LaunchTimeout(Exception):
    """The launch ran past launch.timeout_s."""


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


def _preempted_step(failure) -> int | None:
    """The step a rank saved before it stopped on SIGUSR1 (None: it did not)."""
    data = failure.error_file_data
    return data.get("preempted_step") if isinstance(data, dict) else None


def _preempted(failures: dict) -> int | None:
    """The saved step when the ranks stopped on SIGUSR1 (checkpoint.save_on_signal).

    The ranks agree to stop and save together, so those that did not say so
    themselves were stopped by the agent once the first had left.
    """
    steps = [_preempted_step(f) for f in failures.values()]
    saved = [step for step in steps if step is not None]
    others = [f for f, step in zip(failures.values(), steps, strict=True) if step is None]
    if not saved or not all(_stopped_by_agent(f) for f in others):
        return None
    return max(saved)


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
        stopped = _stopped_by_agent(failures[r]) or _preempted_step(failures[r]) is not None
        return (stopped, code >= 0, not _out_of_memory(failures[r]), failures[r].timestamp, r)

    return min(failures, key=rank_order)


def _failure_message(error) -> str:
    rank = _root_failure(error.failures)
    failure = error.failures[rank]
    message = failure.message or ""
    if not message or message.startswith("To enable traceback"):
        message = f"exit code {failure.exitcode}"
    if isinstance(failure.error_file_data, dict) and failure.error_file_data.get("after_result"):
        return message.splitlines()[0]
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
    if launch.nnodes > 1 and launch.node_rank > 0:
        wait_for_endpoint(launch.rdzv_endpoint, launch.timeout_s)
    with tempfile.TemporaryDirectory(prefix="mtb-launch-") as tmp, _launcher_variable():
        launch_config = _elastic_config(launch, str(Path(tmp) / "logs"))
        _quiet_elastic_logs()
        try:
            with deadline(launch.timeout_s), interruptible():
                return elastic_launch(launch_config, entrypoint)(*args)
        except ChildFailedError as error:
            saved = _preempted(error.failures)
            if saved is not None:
                raise Preempted(saved) from None
            raise RunFailed(_failure_message(error)) from None
        except SignalException as error:
            raise Interrupted(error.sigval) from None


@contextlib.contextmanager
def _launcher_variable():
    """``MTB_LAUNCHER_PID`` for the workers started meanwhile (they inherit this process's
    environment), removed after: a later child of this process is no worker of it."""
    previous = os.environ.get(lifeline.LAUNCHER_VARIABLE)
    os.environ[lifeline.LAUNCHER_VARIABLE] = str(os.getpid())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(lifeline.LAUNCHER_VARIABLE, None)
        else:
            os.environ[lifeline.LAUNCHER_VARIABLE] = previous


def spawn(config, module: str = "mtb.worker", *args: str) -> None:
    """Run ``python -m MODULE CONFIG.json ARGS`` workers through torch's elastic launch API.

    Each starts through mtb.lifeline, which ties it to this process first.
    """
    with tempfile.TemporaryDirectory(prefix="mtb-config-") as tmp:
        config_path = Path(tmp) / "config.json"
        config_path.write_text(json.dumps(config_mod.to_dict(config)))
        command = ("-m", "mtb.lifeline", module, str(config_path), *args)
        _elastic(config.launch, sys.executable, *command)


#: what a collective raises on a rank whose peer has gone
PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")
#: how long such a rank waits before it says so: the launcher's stop (on Ctrl-C, or after the
#: peer's own failure) reaches it within this and ends it without a word
PEER_LOST_GRACE_S = 3.0


def record_error(error: BaseException) -> None:
    """One line on stderr and in torchelastic's error file, for the launcher to report.

    Plugins that failed around a written result were each said already: their
    summary goes to the launcher only, marked so that it blames no rank; so does a
    stop on SIGUSR1 after a save (checkpoint.save_on_signal), marked with its step.
    A rank that lost a peer first gives the launcher's stop time to arrive, so a
    Ctrl-C or a peer's failure is not said in its name.
    """
    if isinstance(error, PluginsFailed):
        lifeline.record(one_line(error), echo=False, after_result=True)
    elif isinstance(error, Preempted):  # the launcher says it once, for every rank
        lifeline.record(one_line(error), echo=False, preempted_step=error.step)
    else:
        if any(text in str(error) for text in PEER_LOST):
            time.sleep(PEER_LOST_GRACE_S)
        lifeline.record(one_line(error))


def _call_recording_errors(function, *args):
    """A launched worker: ``function(*args)``, or one line for the agent and exit 1.

    It dies with the launcher; its signals are not taken (torch is imported by now).
    """
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


def node_provenance(context) -> list[dict]:
    """Each node's own provenance (from its local rank 0), ordered by node rank."""
    from mtb import distributed

    mine = None
    if context.local_rank == 0:
        node_rank = int(os.environ.get("GROUP_RANK", context.config.launch.node_rank))
        mine = {"node_rank": node_rank, "first_rank": context.rank, **provenance.node()}
    return [n for n in distributed.gather(context, mine) if n is not None]


def entry(main) -> None:
    """Run a launched worker's ``main`` and leave without interpreter shutdown.

    Shutdown runs the C++ destructors of gloo's and the store's threads in no
    fixed order; a rank that had used DCP then sometimes aborted (``terminate
    called without an active exception``) after its work was done. A native
    abort before that still shows where Python was (faulthandler).
    """
    faulthandler.enable()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
