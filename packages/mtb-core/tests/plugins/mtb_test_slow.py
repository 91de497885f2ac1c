"""A one-process strategy whose setup sleeps, to test the launch deadline in-process."""

import time

from mtb import hookimpl
from mtb.strategy import Strategy


class Slow(Strategy):
    name = "test-slow"
    max_world_size = 1

    def setup(self, model, make_optimizer, context):
        time.sleep(3600)


@hookimpl
def mtb_register_strategies(register):
    register(Slow())
