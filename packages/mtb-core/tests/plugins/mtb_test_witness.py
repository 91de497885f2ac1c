"""A test plugin that leaves a file per rank and trial: which process trained.

``test-witness`` is the plain engine at any world size (no gradient sync);
``mtb_trial_start`` writes ``rank_<R>.pid`` (the process id) into the
directory named by MTB_TEST_WITNESS_DIR.
"""

import os
from pathlib import Path

from mtb import hookimpl
from mtb.strategy import Strategy


class WitnessStrategy(Strategy):
    name = "test-witness"
    description = "test only: the plain engine on every rank"

    def setup(self, model, make_optimizer, context):
        from mtb.engine import Engine

        return Engine(model, make_optimizer(model.parameters()), context)


@hookimpl
def mtb_register_strategies(register):
    register(WitnessStrategy())


@hookimpl
def mtb_trial_start(context):
    directory = Path(os.environ["MTB_TEST_WITNESS_DIR"])
    (directory / f"rank_{context.rank}.pid").write_text(str(os.getpid()))
