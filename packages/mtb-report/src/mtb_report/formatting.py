"""How numbers read in tables: fixed precision, units in words, a dash for unknown."""

import json

from mtb.api import above_peak

DASH = "—"


def number(value, digits: int = 1) -> str:
    return DASH if value is None else f"{value:,.{digits}f}"


def mean_std(mean, std, repeated: bool, digits: int = 1) -> str:
    """``mean ± std`` when repeated, else the mean alone."""
    if mean is None:
        return DASH
    return f"{mean:,.{digits}f} ± {std:,.{digits}f}" if repeated else f"{mean:,.{digits}f}"


def percent(fraction, digits: int = 1, signed: bool = False) -> str:
    if fraction is None:
        return DASH
    return f"{fraction * 100:+.{digits}f}%" if signed else f"{fraction * 100:.{digits}f}%"


def mfu(fraction) -> str:
    """MFU in percent, never above 100 % without saying that the peak is too low."""
    return percent(fraction, 2) + (" (above peak!)" if above_peak(fraction) else "")


UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def size(value, std=None) -> str:
    """Bytes in binary units (MiB for the sizes a benchmark reports); ``± std`` in the same unit."""
    if value is None:
        return DASH
    unit, scale = next(((u, s) for u, s in UNITS if abs(value) >= s), ("B", 1))
    digits = 0 if scale == 1 else 1
    spread = "" if std is None else f" ± {std / scale:,.{digits}f}"
    return f"{value / scale:,.{digits}f}{spread} {unit}"


def cell(value) -> str:
    """Any JSON value as table text: scalars as they are, containers compacted."""
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    return str(value)
