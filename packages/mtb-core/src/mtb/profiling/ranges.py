"""Named trace ranges (``mtb.forward`` ...) for the trainer's phases.

Unprofiled runs get a null context instead of ``record_function``, so they
pay no profiler call per phase.
"""

import contextlib

from torch.profiler import record_function

_NULL = contextlib.nullcontext()  # stateless, so one instance serves every range


def no_range(name: str):
    return _NULL


def ranges(profiled: bool):
    """``record_function`` when a profiler records this trial, else :func:`no_range`."""
    return record_function if profiled else no_range
