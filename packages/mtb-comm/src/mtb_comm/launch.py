"""Run one worker function on every rank, with core's launch settings.

Core's launcher starts ``mtb.worker`` for a training RunConfig; these
commands need the same launch (elastic agent, c10d rendezvous, spawn, the
wall-clock limit, OMP threads per worker, one-line failures) around a
function of their own. The worker function runs on every rank and returns
rank 0's value; under torchrun it runs in this process.
"""

import os
import sys
import tempfile
import types

from mtb import launcher, provenance
from mtb.errors import RunFailed


def _entry(function, spec):
    """A launched worker: run, or leave one line for the agent and exit 1."""
    from mtb.worker import _record_error

    try:
        return function(spec)
    except Exception as error:
        if os.environ.get("MTB_DEBUG"):
            raise
        _record_error(error)
        sys.exit(1)


def _spawn(function, spec):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    launch = spec.launch
    os.environ.setdefault(provenance.COMMAND_LINE_VARIABLE, provenance.command_line())
    threads = max(1, (os.cpu_count() or 1) // launch.nproc_per_node)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    with tempfile.TemporaryDirectory(prefix="mtb-comm-launch-") as tmp:
        # core's elastic settings read only ``.launch`` of the config
        config = launcher._elastic_config(types.SimpleNamespace(launch=launch), tmp)
        launcher._quiet_elastic_logs()
        try:
            returned = elastic_launch(config, _entry)(function, spec)
        except ChildFailedError as error:
            raise RunFailed(launcher._failure_message(error)) from None
    return returned.get(0)


def run_on_ranks(function, spec):
    """``function(spec)`` on every rank under ``spec.launch.timeout_s``; rank 0's return value.

    Raises launcher.LaunchTimeout past the limit and RunFailed when a worker fails.
    On ranks other than 0 of a torchrun launch the value is None.
    """
    from mtb.distributed import launched_by_torchrun

    with launcher.deadline(spec.launch.timeout_s):
        if launched_by_torchrun():
            return function(spec)
        return _spawn(function, spec)
