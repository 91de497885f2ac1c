"""Slows one rank after every step (MTB_TEST_SLOW_RANK, MTB_TEST_SLOW_MS), to make a straggler.

Loaded through MTB_PLUGIN_MODULES so launched workers see it too.
"""

import os
import time

from mtb import hookimpl


@hookimpl
def mtb_step_end(context, metrics):
    if os.environ.get("MTB_TEST_SLOW_RANK") == str(context.rank):
        time.sleep(float(os.environ.get("MTB_TEST_SLOW_MS", "50")) / 1000.0)
