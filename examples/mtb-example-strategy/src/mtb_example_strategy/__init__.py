"""An example third-party MiniTrainBench plugin.

It registers one strategy, ``example-localsgd`` (Local SGD), through the
``mtb_register_strategies`` hook in :mod:`mtb_example_strategy.plugin`.
Nothing here imports torch: ``mtb --help`` and ``mtb plugins`` stay cheap.
"""

__version__ = "0.2.0"  # the distribution's (pyproject.toml); mtb.testing checks they agree
