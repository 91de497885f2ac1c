"""MiniTrainBench metric loggers: TensorBoard, Weights & Biases (offline), MLflow (file store)."""

from importlib.metadata import version

__version__ = version("mtb-loggers")
