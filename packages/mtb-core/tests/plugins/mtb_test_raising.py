"""Raises in every hook: mtb must skip it with one warning and keep working."""

from mtb import hookimpl
from mtb.strategy import Strategy


class Broken(Strategy):
    name = "broken"


def _fail():
    raise RuntimeError("this plugin is broken")


def _failing():
    """A fresh hook implementation that raises (each hook needs its own function)."""

    def hook():
        _fail()

    return hookimpl(hook)


@hookimpl
def mtb_register_strategies(register):
    register(Broken())  # registered, then the hook raises: nothing of it may stay
    _fail()


mtb_register_checkpoint_backends = _failing()
mtb_register_profilers = _failing()
mtb_register_reporters = _failing()
mtb_register_commands = _failing()
mtb_trial_start = _failing()
mtb_step_end = _failing()
mtb_checkpoint_saved = _failing()
mtb_run_end = _failing()
