"""``mtb run``: one benchmark of one strategy; ``mtb profile``: the same run, profiled."""

import click

from mtb.cli.config_options import (
    GroupedOptionsCommand,
    config_options,
    plugin_option_groups,
    plugin_options,
)
from mtb.flags import flags_from

RUN_HELP = """Train the synthetic-token GPT workload with one strategy and report its numbers.

Precedence: defaults < --preset < --config file < flags. With
--nproc-per-node/--nnodes above 1 the workers are started through torch's
elastic launch API; under torchrun each worker runs this command itself.
Rank 0 writes one JSON result with every rank's numbers.
"""

PROFILE_HELP = """Run the workload under a profiler (default: torch) and summarise its traces.

Takes every option of `mtb run`. Each rank writes a Chrome trace
(rank_00000.trace.json.gz, ...); rank 0 writes profile_summary.json and
profile_summary.md beside them (--profile-dir) and a result of kind
"profile". The same steps first run unprofiled to measure the profiler's
overhead (--no-profile-baseline skips that).
"""


def build_run_command(pm, name: str = "run") -> click.Command:
    """``mtb run`` (or ``mtb profile``), with the options of every registered strategy."""
    profiling = name == "profile"

    @click.command(
        name,
        cls=GroupedOptionsCommand,
        option_groups=plugin_option_groups(pm),
        help=PROFILE_HELP if profiling else RUN_HELP,
    )
    @click.option(
        "--config",
        "config_file",
        type=click.Path(dir_okay=False),
        help="TOML run file; flags given here override its values",
    )
    @click.option(
        "--print-config",
        is_flag=True,
        help="print the effective config as TOML and exit without running",
    )
    @config_options
    @plugin_options(pm)
    def run_command(config_file, print_config, **params):
        from mtb import config as config_mod
        from mtb.launcher import launch, prepare

        file_values = config_mod.load_toml(config_file) if config_file else {}
        if profiling:
            profile = file_values.setdefault("profile", {})
            if isinstance(profile, dict):
                profile.setdefault("profiler", "torch")
        cfg = prepare(config_mod.resolve(file_values, flags_from(params)), pm)
        if print_config:
            click.echo(config_mod.to_toml(cfg), nl=False)
            return
        launch(cfg, pm)

    return run_command
