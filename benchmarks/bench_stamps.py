"""Observer for the distributed harness benchmark: rank 0's end time of every step.

Loaded into mtb's workers with MTB_PLUGIN_MODULES=bench_stamps; writes the
timestamps to MTB_BENCH_STAMPS when the run ends (rank 0 only).
"""

import json
import os
import time
from pathlib import Path

from mtb.api import hookimpl

ENDS: list[float] = []


@hookimpl
def mtb_step_end(context, metrics):
    ENDS.append(time.perf_counter())


@hookimpl
def mtb_run_end(context, result):
    path = os.environ.get("MTB_BENCH_STAMPS")
    if path and context.rank == 0:
        Path(path).write_text(json.dumps(ENDS))
