"""A data-parallel test strategy (gradients averaged by all_reduce), so that the loggers'
tests launch two ranks on core alone. Loaded through MTB_PLUGIN_MODULES."""

from mtb.api import Strategy, hookimpl


class AllReduceStrategy(Strategy):
    name = "loggers-test-allreduce"
    description = "test only: average gradients with all_reduce"

    def setup(self, model, make_optimizer, context):
        import torch.distributed as dist

        from mtb.api import Engine

        class AllReduceEngine(Engine):
            def backward(self, loss):
                super().backward(loss)
                for param in self.model.parameters():
                    dist.all_reduce(param.grad, op=dist.ReduceOp.AVG)

        return AllReduceEngine(model, make_optimizer(model.parameters()), context)


@hookimpl
def mtb_register_strategies(register):
    register(AllReduceStrategy())
