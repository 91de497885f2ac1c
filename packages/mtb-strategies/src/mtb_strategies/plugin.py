"""The ``strategies`` plugin (entry point ``mtb = strategies``).

Registers ``ddp``, ``fsdp`` and ``nd`` (torch.distributed) and ``zero1``/``zero2``/
``zero3`` (DeepSpeed); the ZeRO strategies register even when DeepSpeed is
missing, marked unavailable with the install hint; and the ``deepspeed``
checkpoint backend the ZeRO strategies save with. torch and deepspeed are
imported inside ``Strategy.setup``, never here.
"""

from mtb.api import hookimpl
from mtb_strategies.ddp import DDPStrategy
from mtb_strategies.deepspeed_checkpoint import DeepSpeedBackend
from mtb_strategies.fsdp import FSDPStrategy
from mtb_strategies.nd import NDStrategy
from mtb_strategies.zero import ZeroStrategy


@hookimpl
def mtb_register_strategies(register):
    register(DDPStrategy())
    register(FSDPStrategy())
    register(NDStrategy())
    for stage in (1, 2, 3):
        register(ZeroStrategy(stage))


@hookimpl
def mtb_register_checkpoint_backends(register):
    register(DeepSpeedBackend())
