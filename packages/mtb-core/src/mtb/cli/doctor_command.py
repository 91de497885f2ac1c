"""``mtb doctor``: diagnose this node (and, with --nnodes, the links between nodes)."""

import os

import click

from mtb.cli.config_options import launch_options, split_launch

# A diagnosis should answer in a minute, not in mtb run's half hour.
DEFAULT_TIMEOUT_S = 60.0


def quiet_cpp_logs(environ=os.environ) -> None:
    """torch's C++ logs off but fatal ones (it reads TORCH_CPP_LOG_LEVEL once, on import).

    A store client retrying an address that does not answer logs each retry
    with a C++ stack (dozens of ``frame #`` lines); the rendezvous check
    already says what failed, in one line. MTB_DEBUG or a level the user set
    keeps them.
    """
    if not environ.get("MTB_DEBUG"):
        environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")


def _launch(params: dict, environ: dict):
    """The [launch] flags; without --rdzv-endpoint, MASTER_ADDR:MASTER_PORT when both are set."""
    from mtb.config import LaunchConfig

    launch, _ = split_launch(params)
    launch.setdefault("timeout_s", DEFAULT_TIMEOUT_S)
    if "rdzv_endpoint" not in launch and {"MASTER_ADDR", "MASTER_PORT"} <= environ.keys():
        launch["rdzv_endpoint"] = f"{environ['MASTER_ADDR']}:{environ['MASTER_PORT']}"
    return LaunchConfig(**launch)


@click.command("doctor")
@click.option("--skip-connectivity", is_flag=True, help="no rendezvous, all_reduce or probe")
@click.option(
    "--probe-mib",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="size of the timed all_reduce, MiB",
)
@click.option("--output", help="result JSON  [default: results/doctor-<UTC time>.json]")
@launch_options
@click.pass_obj
def doctor_command(pm, /, skip_connectivity, probe_mib, output, **params):
    """Check software, hardware, network, variables and connectivity; ok, warn or fail each.

    Every check carries an actionable message. Connectivity launches
    --nproc-per-node ranks on each of --nnodes nodes through the same
    rendezvous as mtb run (--rdzv-endpoint, else MASTER_ADDR:MASTER_PORT
    when both are set; default --timeout here: 60 s), checks an
    all_reduce and times one of --probe-mib MiB. Writes one JSON document
    (kind "doctor") and prints a table; exits 1 when any check fails.
    Diagnosing several nodes, NCCL and gloo: docs/multi-node.md.
    """
    quiet_cpp_logs()  # before anything below imports torch
    from mtb import provenance
    from mtb.console import stdout
    from mtb.doctor import document
    from mtb.documents import default_output, plugin_list
    from mtb.output_paths import check_file
    from mtb.reporting import write_atomic

    path = output or default_output("doctor")
    check_file("--output", path)
    launch = _launch(params, dict(os.environ))
    started = provenance.utc_now()
    checks = document.run_checks(launch, probe_mib * 2**20, skip_connectivity)
    doc = document.build(checks, launch, plugin_list(pm), started)
    write_atomic(path, pm.registry("reporter").get("json").render([doc]))
    stdout.print(document.table(doc))
    click.echo(f"result written to {path}")
    if doc["verdict"] == "fail":
        raise SystemExit(1)
