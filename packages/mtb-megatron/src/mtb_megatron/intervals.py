"""Which of Megatron's log lines measure steady state, and how its counters add up.

Up to core_v0.15, ``training_log`` (megatron/training/training.py) prints
every ``--log-interval`` iterations and resets the interval timer and the
skipped/NaN counters at each line: a line covers the iterations since the
previous one, and the first line holds the start-up.

Since core_v0.16.0 it also prints the run's first iteration, without
resetting anything at that line (``should_reset = not is_first_iteration``):
the next line covers the first iteration again. Both lines hold the
start-up, and the first line's counters are repeated in the second.
"""

import re

#: the first megatron-core release (MAJOR, MINOR) that prints the first iteration
FIRST_LINE_SINCE = (0, 16)


def first_line_repeated(core_version: str) -> bool:
    """Whether a checkout of megatron-core ``core_version`` (``0.16.1``, ``0.16.0rc0``) does so."""
    major, minor = re.match(r"(\d+)\.(\d+)", core_version).groups()
    return (int(major), int(minor)) >= FIRST_LINE_SINCE


def measured(lines: list[dict], repeated: bool) -> list[dict]:
    """The lines whose interval holds no start-up; else the last line (its longest window)."""
    return lines[2 if repeated else 1 :] or lines[-1:]


def counted(lines: list[dict], repeated: bool) -> list[dict]:
    """The lines whose counters add up to the run's: the repeated first line is left out."""
    return lines[1:] if repeated and len(lines) > 1 else lines
