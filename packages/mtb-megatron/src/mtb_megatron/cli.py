"""The click commands: ``mtb megatron run``, ``mtb megatron matrix``, ``mtb megatron topology``.

Options are generated from the config classes' fields with core's option
builder; the launch options are core's own ``[launch]`` fields, so
``--nproc-per-node``, ``--nnodes`` and ``--timeout`` mean what they mean for
``mtb run``. torch and megatron-core are imported only when a command runs.
"""

import attrs
import click

from mtb.api import LAUNCH_SECTION, ConfigError, LaunchConfig, option_for, split_launch
from mtb_megatron import config as cfg
from mtb_megatron.topology import all_topologies, parse_topologies, parse_topology

#: launch settings that mean something to torchrun around Megatron (it always uses CUDA/NCCL)
RUN_LAUNCH = (
    "nproc_per_node",
    "nnodes",
    "node_rank",
    "rdzv_endpoint",
    "rdzv_id",
    "max_restarts",
    "timeout_s",
)


def _options(cls, launch: tuple[str, ...]):
    """One option per documented field of ``cls``, then the named launch fields."""
    fields = [(None, f) for f in attrs.fields(cls) if f.metadata.get("help")]
    fields += [(LAUNCH_SECTION, f) for f in attrs.fields(LaunchConfig) if f.name in launch]

    def decorate(command):
        for section, field in reversed(fields):
            command = option_for(section, field)(command)
        return command

    return decorate


def _split(params: dict) -> tuple[dict, LaunchConfig]:
    """The flags given (None: not given, the default applies) and core's launch settings."""
    launch, values = split_launch(params)
    return values, LaunchConfig(**launch)


def _build(cls, params: dict, **values):
    given, launch = _split(params)
    return cls(**given, **values, launch=launch)


def _with_output(config):
    """The config with its result path decided and checked (before any work)."""
    from mtb.api import check_output, default_output

    if not config.output:
        config = attrs.evolve(config, output=default_output("megatron"))
    check_output("--output", config.output)
    return config


def _plugin_manager():
    from mtb.api import get_plugin_manager

    return click.get_current_context().find_root().obj or get_plugin_manager()


def _write(pm, document: dict, path: str) -> None:
    from mtb.api import write_result

    write_result(pm, document, path)


def _console():
    from mtb.api import plain_console, stdout

    return stdout if stdout.is_terminal else plain_console(width=140)


def _benchmark(config: cfg.MegatronConfig, mode: str, dry_run: bool) -> None:
    from mtb.api import RunFailed, plugin_list
    from mtb_megatron import benchmark, checkout, command, dataset, plan, tables, transformer

    pinned = checkout.verify(config.megatron_dir, config.megatron_ref)
    data = dataset.describe(config)
    config, choice = transformer.apply(config)
    if dry_run:
        print("\n".join([*plan.lines(config, pinned, choice), dataset.line(data)]))
        cache = benchmark.log_dir(config.output or cfg.OUTPUT_DEFAULT) / "data-cache"
        for topology in config.topologies:
            dp = config.data_parallel(topology)
            print(f"# {topology.name}: TP {topology.tp}, PP {topology.pp}, DP {dp}")
            argv = command.build(config, topology, str(pinned.script), str(cache))
            print(command.shell_line(argv, pinned.path))
        return
    config = _with_output(config)
    plan.refuse_busy_gpus(config)
    pm = _plugin_manager()
    document = benchmark.execute(config, pinned, choice, plugin_list(pm), mode, data)
    _write(pm, document, config.output)
    console = _console()
    console.print(tables.runs_table(document))
    for line in tables.reasons_lines(document):
        console.print(line)
    print(f"result written to {config.output}", flush=True)
    if document["status"] != "ok":
        raise RunFailed(document["error"])
    if config.evidence == "performance" and not document["performance_valid"]:
        raise RunFailed(
            f"performance evidence requested but not valid: {document['performance_reasons'][0]}"
        )


DRY_RUN = click.option(
    "--dry-run", is_flag=True, help="print each topology's exact command and exit without running"
)


@click.group("megatron")
def megatron_group():
    """Megatron-LM benchmarks over TP/PP/DP topologies, and megatron-core topology checks.

    What TP, PP and DP split and why: docs/parallelism.md; the runner: docs/megatron.md.
    """


RUN_TAIL = (
    "\n\nChecks that the checkout's HEAD is --megatron-ref (never changes it), "
    "launches pretrain_gpt.py with --mock-data (or --data-path with --data) through "
    "torchrun (python -m torch.distributed.run) with --nproc-per-node x --nnodes ranks, keeps each "
    "launch's stdout and stderr with their SHA256, samples GPU memory (NVML), parses "
    "Megatron's iteration lines and classifies failures (oom, communication, timeout, "
    "import, nan, unknown). Writes one JSON result (kind megatron); exits 1 when a "
    "launch failed or performance evidence was asked for and is not valid."
)


@megatron_group.command(
    "run", help="One topology (TPxPP; DP follows from the world size), --repeats times." + RUN_TAIL
)
@click.option(
    "--topology", "--topologies", default="1x1", show_default=True, help="TPxPP, e.g. 2x1"
)
@DRY_RUN
@_options(cfg.MegatronConfig, RUN_LAUNCH)
def run_command(topology, dry_run, **params):
    if "," in topology.strip(", "):
        raise ConfigError(
            "topology", f"run takes one TPxPP; use mtb megatron matrix for {topology}"
        )
    config = _build(cfg.MegatronConfig, params, topologies=[parse_topology(topology.strip(", "))])
    _benchmark(config, "run", dry_run)


@megatron_group.command(
    "matrix", help="Several topologies, each --repeats times, in the order given." + RUN_TAIL
)
@click.option(
    "--topologies",
    default=None,
    help="comma-separated TPxPP list, e.g. 1x1,2x1,4x1,2x2,1x4  "
    "[default: every TPxPP that divides the world size and fits the model and batches]",
)
@DRY_RUN
@_options(cfg.MegatronConfig, RUN_LAUNCH)
def matrix_command(topologies, dry_run, **params):
    if topologies is None:
        launch = _split(params)[1]
        chosen = _fitting(params, all_topologies(launch.nproc_per_node * launch.nnodes))
    else:
        chosen = parse_topologies(topologies)
    config = _build(cfg.MegatronConfig, params, topologies=chosen)
    _benchmark(config, "matrix", dry_run)


def _fitting(params: dict, candidates: list) -> list:
    """The candidates whose DP, layers and heads the model and batches allow (else all)."""

    def fits(topology) -> bool:
        try:
            _build(cfg.MegatronConfig, params, topologies=[topology])
        except ConfigError:
            return False
        return True

    return [t for t in candidates if fits(t)] or candidates


@megatron_group.command("topology")
@click.option(
    "--topologies",
    default=None,
    help="comma-separated TPxPP list  [default: every TPxPP that divides the world size]",
)
@_options(cfg.TopologyCheckConfig, ("timeout_s",))
def topology_command(topologies, **params):
    """Check megatron-core's TP, PP and DP groups on every rank against mtb's own layout.

    Needs the [megatron-core] extra. Spawns --world-size ranks on the CPU over
    gloo, runs megatron-core's initialize_model_parallel for each topology and
    compares every rank's group members and ranks with the layout mtb computes
    (Megatron's order tp-cp-ep-dp-pp). Writes one JSON result (kind megatron,
    mode topology); exits 1 on any mismatch. No GPU needed.
    """
    from mtb.api import RunFailed, plugin_list
    from mtb_megatron import tables, topology_check

    config = _build(cfg.TopologyCheckConfig, params)
    chosen = parse_topologies(topologies) if topologies else all_topologies(config.world_size)
    config = _with_output(attrs.evolve(config, topologies=chosen))
    pm = _plugin_manager()
    document = topology_check.execute(config, plugin_list(pm))
    _write(pm, document, config.output)
    _console().print(tables.topology_table(document))
    print(f"result written to {config.output}", flush=True)
    if document["status"] != "ok":
        raise RunFailed(document["error"])


COMMANDS = (megatron_group,)
