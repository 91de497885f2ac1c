"""Expanding a matrix into cells: the product of the axes, plus includes, less excludes.

A cell's id names what sets it apart (its axis and include values, and the
repeat when there are several), so the same cell keeps the same result file
across runs of the matrix and ``--resume`` can find it.
"""

import itertools
import re

import attrs

from mtb.matrix.spec import MatrixSpec
from mtb.slurm.settings import split_options

UNSAFE = re.compile(r"[^A-Za-z0-9_.=,+-]")


@attrs.frozen
class Cell:
    """One run of the command: all of its options and the ones that identify it."""

    id: str
    options: dict
    varying: dict
    repeat: int

    @property
    def world_size(self) -> int:
        return int(self.options.get("nproc_per_node", 1)) * int(self.options.get("nnodes", 1))

    @property
    def command_options(self) -> dict:
        """The options that are the command's flags (not ``slurm_*`` job resources)."""
        return split_options(self.options)[0]

    def argv(self) -> list[str]:
        """The command-line flags of this cell (``--output`` is added by the runner)."""
        args = []
        for key, value in self.command_options.items():
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                args.append(flag if value else f"--no-{flag[2:]}")
            else:
                args += [flag, str(value)]
        return args


def _matches(varying: dict, pattern: dict) -> bool:
    return all(key in varying and varying[key] == value for key, value in pattern.items())


def _id(varying: dict, repeat: int, repeats: int) -> str:
    parts = [f"{key}={value}" for key, value in varying.items()]
    if repeats > 1:
        parts.append(f"repeat={repeat}")
    return UNSAFE.sub("_", ",".join(parts)) or "cell"


def combinations(spec: MatrixSpec) -> list[dict]:
    """The varying values of every cell, in order, each once."""
    keys = list(spec.axes)
    product = [dict(zip(keys, v, strict=True)) for v in itertools.product(*spec.axes.values())]
    if not keys and spec.include:  # only the listed cells, not the bare [options] one
        product = []
    kept = [v for v in product if not any(_matches(v, pattern) for pattern in spec.exclude)]
    unique: list[dict] = []
    for varying in [*kept, *spec.include]:
        if varying not in unique:
            unique.append(varying)
    return unique


def expand(spec: MatrixSpec) -> list[Cell]:
    cells = []
    for varying in combinations(spec):
        for repeat in range(1, spec.repeats + 1):
            options = {**spec.options, **varying}
            cells.append(Cell(_id(varying, repeat, spec.repeats), options, varying, repeat))
    return cells
