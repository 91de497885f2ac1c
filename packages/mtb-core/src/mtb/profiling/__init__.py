"""Profiling: the torch profiler plugin, trace analysis and the profile summary.

Only :mod:`mtb.profiling.torch_profiler` needs torch, and it imports it when a
session starts, so ``mtb plugins`` and ``mtb --help`` stay fast.
"""
