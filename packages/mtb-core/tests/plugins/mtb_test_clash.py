"""Registers a second ``single`` strategy: the CLI must refuse the clash in one line."""

from mtb import hookimpl
from mtb.strategy import Strategy


class Clash(Strategy):
    name = "single"


@hookimpl
def mtb_register_strategies(register):
    register(Clash())
