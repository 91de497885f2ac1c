"""Built-in plugin: core's own commands, added through ``mtb_register_commands`` as a
third-party plugin adds its own (``mtb plugins`` lists them under mtb-core).

The command modules are imported when the hook runs, not when the plugin is
loaded; none of them imports torch at module level, so ``mtb --help`` stays fast.
"""

from mtb.hookspecs import hookimpl


@hookimpl
def mtb_register_commands(cli, pm):
    from mtb.cli.checkpoint_command import checkpoint_group
    from mtb.cli.data_command import data_group
    from mtb.cli.doctor_command import doctor_command
    from mtb.cli.estimate_command import estimate_command
    from mtb.cli.matrix_command import matrix_group
    from mtb.cli.plugins_command import plugins_command
    from mtb.cli.run_command import build_run_command
    from mtb.cli.slurm_command import slurm_group
    from mtb.fault.command import fault_group

    for command in (
        build_run_command(pm),
        build_run_command(pm, "profile"),
        plugins_command,
        fault_group,
        checkpoint_group,
        doctor_command,
        matrix_group,
        estimate_command,
        data_group,
        slurm_group,
    ):
        cli.add_command(command)
