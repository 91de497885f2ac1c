"""``mtb run``: one benchmark of one strategy."""

import click

from mtb.cli.config_options import config_options, flags_from, strategy_options


def build_run_command(pm) -> click.Command:
    """The run command, with the options of every registered strategy added."""

    @click.command("run")
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
    @strategy_options(pm)
    def run_command(config_file, print_config, **params):
        """Train the synthetic-token GPT workload with one strategy and report its numbers.

        Precedence: defaults < --preset < --config file < flags. With
        --nproc-per-node/--nnodes above 1 the workers are started through torch's
        elastic launch API; under torchrun each worker runs this command itself.
        Rank 0 writes one JSON result with every rank's numbers.
        """
        from mtb import config as config_mod
        from mtb.launcher import launch, prepare

        file_values = config_mod.load_toml(config_file) if config_file else {}
        cfg = prepare(config_mod.resolve(file_values, flags_from(params)), pm)
        if print_config:
            click.echo(config_mod.to_toml(cfg), nl=False)
            return
        launch(cfg, pm)

    return run_command
