"""What this machine can run: each cell runs, or is skipped with the reason.

Cells needing more ranks or devices than the machine has, nodes beyond this
one, a command or strategy that is not installed, are skipped. Option
mistakes are noted, and the cell runs and fails with its command's own
one-line error, so a matrix written for a newer mtb still runs what it can.
"""

import os

import attrs
import click

from mtb.errors import MtbError
from mtb.matrix.cells import Cell


@attrs.frozen
class Machine:
    """Ranks this machine can host: CPU cores, or CUDA devices for CUDA cells."""

    cpus: int
    cuda_devices: int
    max_ranks: int | None = None
    #: a cluster executor's: any number of nodes and ranks (the scheduler refuses what
    #: it cannot host)
    cluster: bool = False

    def ranks(self, device: str) -> int:
        if self.max_ranks:
            return self.max_ranks
        return self.cuda_devices if device == "cuda" else self.cpus


def this_machine(max_ranks: int | None = None) -> Machine:
    import torch

    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return Machine(os.cpu_count() or 1, cuda, max_ranks)


@attrs.frozen
class Plan:
    """A cell as it will be treated here; ``config`` and ``estimate`` for ``run`` cells."""

    cell: Cell
    skip: str | None = None
    note: str | None = None
    config: object | None = None
    estimate: dict | None = None
    #: whether the command takes --timeout (the matrix passes its own)
    takes_timeout: bool = True


def find_command(cli: click.Group, path: str) -> click.Command | None:
    command: click.Command = cli
    for word in path.split():
        if not isinstance(command, click.Group) or word not in command.commands:
            return None
        command = command.commands[word]
    return command


def option_names(command: click.Command) -> set[str]:
    names = set()
    for param in command.params:
        for flag in [*param.opts, *param.secondary_opts]:
            if flag.startswith("--"):
                names.add(flag[2:].replace("-", "_"))
    return names


#: what a cluster job adds to a multi-node cell's flags (the address is the job's own)
JOB_FLAGS = ("--rdzv-endpoint", "first-node:29500")


def resolve_run(command: click.Command, cell: Cell, pm, added: tuple[str, ...] = ()):
    """The RunConfig ``mtb run`` would build from the cell's flags and ``added`` (it raises
    what run would)."""
    from mtb import config as config_mod
    from mtb.flags import flags_from

    with command.make_context(command.name, [*cell.argv(), *added]) as ctx:
        params = dict(ctx.params)
    config_file = params.pop("config_file", None)
    params.pop("print_config", None)
    file_values = config_mod.load_toml(config_file) if config_file else {}
    return config_mod.resolve(file_values, flags_from(params))


def _device(cell: Cell, machine: Machine) -> str:
    device = str(cell.options.get("device", "auto"))
    return ("cuda" if machine.cuda_devices else "cpu") if device == "auto" else device


def _skip(cell: Cell, command_path: str, command, machine: Machine, pm) -> str | None:
    if command is None:
        return f"mtb {command_path} is not installed (a plugin adds it)"
    return _beyond(cell, machine) or _strategy_missing(cell, command_path, pm)


def _beyond(cell: Cell, machine: Machine) -> str | None:
    """Why this machine cannot host the cell (never for a cluster)."""
    if machine.cluster:
        return None
    if int(cell.options.get("nnodes", 1)) > 1:
        nodes = cell.options["nnodes"]
        return f"needs {nodes} nodes; a local matrix runs here only (--executor slurm submits it)"
    device = _device(cell, machine)
    if device == "cuda" and not machine.cuda_devices:
        return "needs CUDA; this machine has no CUDA device"
    limit = machine.ranks(device)
    if cell.world_size > limit:
        return f"needs {cell.world_size} ranks; this machine runs at most {limit} on {device}"
    return None


def _strategy_missing(cell: Cell, command_path: str, pm) -> str | None:
    if command_path == "run":
        entry = pm.registry("strategy").items.get(str(cell.options.get("strategy", "single")))
        if entry is None:
            return f"strategy {cell.options.get('strategy')!r} is not installed"
        if entry.unavailable_reason:
            return f"strategy {entry.name!r} is unavailable: {entry.unavailable_reason}"
    return None


def plan_cell(cell: Cell, command_path: str, cli: click.Group, pm, machine: Machine) -> Plan:
    """Run or skip, a note on options the command will refuse, and the estimate (run cells)."""
    from mtb.layout import Layout
    from mtb.model import expert_parameter_count, rank_parameter_count

    command = find_command(cli, command_path)
    skip = _skip(cell, command_path, command, machine, pm)
    if command is None:
        return Plan(cell, skip=skip)
    names = option_names(command)
    timeout = "timeout" in names
    unknown = sorted(set(cell.command_options) - names)
    if unknown:
        flags = ", ".join("--" + k.replace("_", "-") for k in unknown)
        note = f"mtb {command_path} has no option {flags}; the cell will fail"
        return Plan(cell, skip, note, takes_timeout=timeout)
    if command_path != "run":
        return Plan(cell, skip, takes_timeout=timeout)
    try:
        multi_node = machine.cluster and int(cell.options.get("nnodes", 1)) > 1
        config = resolve_run(command, cell, pm, JOB_FLAGS if multi_node else ())
        strategy = pm.registry("strategy").items[config.strategy].item
        layout = Layout.of(config)
    except KeyError:  # not installed: already the skip reason
        return Plan(cell, skip)
    except (click.ClickException, MtbError) as error:
        message = error.format_message() if isinstance(error, click.ClickException) else error
        return Plan(cell, skip, f"{message}; the cell will fail")
    parameters = rank_parameter_count(config.model, layout.tp, layout.pp)
    estimate = strategy.state_bytes_estimate(
        parameters,
        layout.state_shards,
        config.training,
        experts=expert_parameter_count(config.model),
        ep=layout.ep,
    )
    return Plan(cell, skip, config=config, estimate=estimate)
