"""``single``: one process, the model unwrapped; the baseline every strategy is held to."""

from mtb.hookspecs import hookimpl
from mtb.strategy import Strategy


class SingleStrategy(Strategy):
    name = "single"
    description = "one process, no wrapper (baseline)"
    max_world_size = 1
    trains_moe = True

    def setup(self, model, make_optimizer, context):
        from mtb.engine import Engine

        return Engine(model, make_optimizer(model.parameters()), context)


@hookimpl
def mtb_register_strategies(register):
    register(SingleStrategy())
