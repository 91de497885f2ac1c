"""A job's resources: the matrix's ``[slurm]`` table, laid under each cell's ``slurm_*`` keys.

Nodes and ranks per node are not here: they are the cell's own ``nnodes``
and ``nproc_per_node``. A cell option named ``slurm_KEY`` (in [options],
an axis or an [[include]]) sets KEY for that cell only and is not passed to
the command. Every mistake is one line naming the key.
"""

import math
import re
import shlex
import sys

import attrs

from mtb.config import ConfigError, setting, structure_into

#: cell option keys with this prefix are Slurm settings, not flags of the command
PREFIX = "slurm_"
#: Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS
TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$")
#: minutes a job gets beyond the command's own --timeout (start-up, result, grace)
MARGIN_S = 120.0


def _time(instance, attribute, value):
    if value is not None and not TIME.match(value):
        raise ConfigError(attribute.name, f"{value!r} is not a Slurm time (MM, HH:MM:SS, D-HH)")


def _word(instance, attribute, value):
    if value is not None and (not value or any(c.isspace() for c in value)):
        raise ConfigError(attribute.name, f"{value!r} must be one word")


@attrs.frozen(kw_only=True)
class SlurmSettings:
    """sbatch options of a job, and how the job starts mtb."""

    partition: str | None = setting(None, help="partition (--partition)", validator=_word)
    account: str | None = setting(None, help="account charged (--account)", validator=_word)
    qos: str | None = setting(None, help="quality of service (--qos)", validator=_word)
    constraint: str | None = setting(None, help="node features (--constraint)")
    time: str | None = setting(
        None,
        help="time limit (--time) [default: the cell's timeout plus 2 minutes]",
        validator=_time,
    )
    cpus_per_task: int | None = setting(
        None, help="CPUs of each node's task (--cpus-per-task)", minimum=1, maximum=4096
    )
    gpus_per_node: int | None = setting(
        None,
        help="GPUs per node (--gpus-per-node) [default: nproc_per_node for device=cuda "
        "cells, none otherwise]",
        minimum=0,
        maximum=1024,
    )
    sbatch_args: str = setting("", help="more sbatch options, as one shell-quoted string")
    setup: str = setting("", help="shell lines each job runs first (module load, venv)")
    python: str = setting(sys.executable, help="the interpreter the jobs run mtb with")
    signal_s: int = setting(
        120,
        help="with checkpoints: seconds before the time limit at which the ranks are "
        "told to save and the job requeues itself (--signal); at least 30, as Slurm "
        "checks time limits about every 30 s",
        minimum=30,
        maximum=86400,
    )

    def __attrs_post_init__(self):
        try:
            shlex.split(self.sbatch_args)
        except ValueError as error:
            raise ConfigError("sbatch_args", f"not valid shell words: {error}") from None

    def time_limit(self, timeout_s: float, checkpoints: bool = False) -> str:
        """--time: the setting, else the command's timeout plus MARGIN_S in whole minutes
        (plus the warning, with checkpoints: the run's own timeout must not win the race
        with Slurm's warning)."""
        if self.time:
            return self.time
        warning = self.signal_s if checkpoints else 0
        return str(math.ceil((timeout_s + warning + MARGIN_S) / 60))

    def check_warning(self, timeout_s: float) -> None:
        """With checkpoints: the warning must come before the time limit, or every attempt
        is told to save as it starts."""
        limit = seconds(self.time_limit(timeout_s, checkpoints=True))
        if self.signal_s >= limit:
            raise ConfigError(
                "signal_s", f"{self.signal_s} s is not below the time limit of {limit} s"
            )

    def gpus(self, nproc_per_node: int, device: str) -> int:
        if self.gpus_per_node is not None:
            return self.gpus_per_node
        return nproc_per_node if device == "cuda" else 0


def seconds(limit: str) -> int:
    """A Slurm time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds."""
    days, _, clock = limit.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-HH[:MM[:SS]]
        parts = [*parts, 0, 0][:3]
    elif len(parts) < 3:  # MM or MM:SS
        parts = [0, *parts, 0][:3]
    hours, minutes, secs = parts
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + secs


def from_table(table: dict, where: str = "slurm") -> SlurmSettings:
    """The ``[slurm]`` table as settings, or one ConfigError naming ``where.KEY``."""
    if not isinstance(table, dict):
        raise ConfigError(where, "must be a table")
    try:
        return structure_into(SlurmSettings, table)
    except ConfigError as error:
        raise ConfigError(f"{where}.{error.field}", error.message) from None


def split_options(options: dict) -> tuple[dict, dict]:
    """A cell's options as (the command's, its ``slurm_*`` settings without the prefix)."""
    own = {k: v for k, v in options.items() if not k.startswith(PREFIX)}
    slurm = {k[len(PREFIX) :]: v for k, v in options.items() if k.startswith(PREFIX)}
    return own, slurm


def for_cell(defaults: SlurmSettings, options: dict) -> SlurmSettings:
    """The matrix's settings with the cell's own ``slurm_*`` keys laid over them."""
    _, own = split_options(options)
    if not own:
        return defaults
    return from_table({**attrs.asdict(defaults), **own}, "slurm")
