"""A data-parallel test strategy: gradients averaged by one all_reduce per tensor.

Loaded through MTB_PLUGIN_MODULES so launched workers see it too. It can be
told to fail or hang on one rank (MTB_TEST_FAIL_RANK, MTB_TEST_HANG_RANK).
"""

import os
import time

from mtb import hookimpl
from mtb.strategy import Strategy


class AllReduceStrategy(Strategy):
    name = "test-allreduce"
    description = "test only: average gradients with all_reduce"

    def setup(self, model, make_optimizer, context):
        import torch.distributed as dist

        from mtb.engine import Engine

        rank = str(context.rank)
        if os.environ.get("MTB_TEST_FAIL_RANK") == rank:
            raise RuntimeError(f"injected failure on rank {rank}")
        if os.environ.get("MTB_TEST_HANG_RANK") == rank:
            time.sleep(3600)

        class AllReduceEngine(Engine):
            def backward(self, loss):
                super().backward(loss)
                if context.distributed:
                    for param in self.model.parameters():
                        dist.all_reduce(param.grad, op=dist.ReduceOp.AVG)

        return AllReduceEngine(model, make_optimizer(model.parameters()), context)


@hookimpl
def mtb_register_strategies(register):
    register(AllReduceStrategy())
