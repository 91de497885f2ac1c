"""Sleeps MTB_TEST_PACE_MS after every step on every rank (untimed: the step's metrics are
taken), so a signal lands mid-run however fast the machine. Loaded by MTB_PLUGIN_MODULES."""

import os
import time

from mtb import hookimpl


@hookimpl
def mtb_step_end(context, metrics):
    time.sleep(float(os.environ.get("MTB_TEST_PACE_MS", "0")) / 1000.0)
