"""Data-parallel and sharded training strategies for MiniTrainBench.

Registers ``ddp`` and ``fsdp``; with the ``[deepspeed]`` extra also
``zero1``/``zero2``/``zero3`` and a DeepSpeed checkpoint backend.
Importing this package must stay cheap: no torch at module level.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mtb-strategies")
except PackageNotFoundError:  # running from a source tree without metadata
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
