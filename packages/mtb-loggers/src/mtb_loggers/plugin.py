"""The ``loggers`` plugin: registers the built-in metric loggers like any third party's.

Each logger imports its library only when a run opens it, so ``mtb plugins``
and ``mtb --help`` stay as fast as without this package.
"""

from mtb.api import hookimpl
from mtb_loggers.mlflow_logger import MLflowLogger
from mtb_loggers.tensorboard_logger import TensorBoardLogger
from mtb_loggers.wandb_logger import WandbLogger


@hookimpl
def mtb_register_metric_loggers(register):
    register(TensorBoardLogger())
    register(WandbLogger())
    register(MLflowLogger())
