"""``mtb plan calibrate``: measure a device profile and write it as TOML.

Every option is checked before anything is launched; bad input is one line
naming the option (exit 2). torch is imported only when the command runs.
"""

import os
from pathlib import Path

import click

from mtb.api import UsageError
from mtb_plan.overheads import REPEATS
from mtb_plan.workload import PRECISIONS

WIDTH = 120  # the tables' natural width, kept when stdout is not a terminal


def positive_list(option: str, text: str) -> list[int]:
    """``1,2,4`` into distinct positive integers in the given order, or one line."""
    values = []
    for part in (p.strip() for p in text.split(",")):
        if not part.isdigit() or int(part) < 1:
            raise UsageError(f"{option}: {part!r} is not a positive integer (give e.g. 1,2,4)")
        values.append(int(part))
    return list(dict.fromkeys(values))


def check_preset(preset: str) -> None:
    from mtb.api import ConfigError, resolve_config

    try:
        resolve_config(flags={"preset": preset})
    except ConfigError as error:
        raise UsageError(f"--{error}") from None


def check_sizes(text: str) -> None:
    """Sizes as mtb comm reads them (bytes with an optional K, M or G), before it is run."""
    for part in (p.strip().upper().removesuffix("B") for p in text.split(",")):
        digits = part[:-1] if part[-1:] in ("K", "M", "G") else part
        if not digits.isdigit() or int(digits) < 1:
            raise UsageError(f"--comm-sizes: {part!r} is not a size (give e.g. 4K,64K,1M,8M)")


def check_device(device: str, ranks: list[int]) -> str:
    """The device to measure on; CUDA needs a GPU per rank."""
    from mtb.api import distributed

    resolved = distributed.resolve_device_type(device)
    if resolved == "cuda":
        import torch

        count = torch.cuda.device_count()
        if max(ranks) > count:
            raise UsageError(
                f"--nproc-per-node: {max(ranks)} ranks need as many GPUs, this node has {count}"
            )
    return resolved


def summary(profile):
    """Three rich tables: the compute figures per ranks-per-node, the fitted curves, and the
    mechanisms' fixed costs."""
    from rich.table import Table

    compute = Table(title=f"profile {profile.name} ({profile.device_name}, {profile.precision})")
    for column in ("ranks/node", "threads", "matmul fwd", "matmul bwd", "attn fwd", "elementwise"):
        compute.add_column(column, justify="right")
    for column in ("op overhead", "optimizer"):
        compute.add_column(column, justify="right")
    for c in profile.compute:
        compute.add_row(
            str(c.ranks_per_node),
            str(c.threads_per_rank or "-"),
            *(
                f"{v / 1e9:.1f} GFLOP/s"
                for v in (c.matmul_flops_per_s, c.matmul_backward_flops_per_s)
            ),
            f"{(c.attention_flops_per_s or 0) / 1e9:.1f} GFLOP/s",
            f"{c.elementwise_bytes_per_s / 1e9:.2f} GB/s",
            f"{c.op_overhead_s * 1e6:.1f} us",
            f"{c.optimizer_bytes_per_s / 1e9:.2f} GB/s",
        )
    comm = Table(title="collective curves: time = latency + bytes x factor / busbw")
    for column in ("collective", "ranks", "ranks/node", "scope", "latency", "busbw"):
        comm.add_column(column, justify="right")
    for curve in profile.comm:
        comm.add_row(
            curve.collective,
            str(curve.group_size),
            "alone" if curve.ranks_per_node is None else str(curve.ranks_per_node),
            curve.scope,
            f"{curve.latency_s * 1e6:.1f} us",
            f"{curve.bus_bandwidth_bytes_per_s / 1e9:.3f} GB/s",
        )
    fixed = Table(title="fixed costs: base, and each mechanism on top")
    for column in ("mechanism", "ranks/node", "per micro-batch", "per step", "per parameter GB"):
        fixed.add_column(column, justify="right")
    for entry in profile.overhead:
        fixed.add_row(
            entry.mechanism,
            str(entry.ranks_per_node),
            f"{entry.per_micro_batch_s * 1e3:.2f} ms",
            f"{entry.per_step_s * 1e3:.2f} ms",
            f"{entry.per_parameter_byte_s * 1e9 * 1e3:.1f} ms"
            if entry.per_parameter_byte_s
            else "",
        )
    return compute, comm, fixed


#: the one-minute load average, per core, above which calibrate warns: at 0.5 another process
#: keeps a core busy half the time, and every figure carries its share of the cores
BUSY_LOAD_PER_CORE = 0.5


def busy_warning(load: float, cores: int) -> str | None:
    """A warning line when other processes load the cores calibrate is about to time."""
    if load <= BUSY_LOAD_PER_CORE * cores:
        return None
    return (
        f"warning: the load average is {load:.1f} on {cores} core(s) before calibrating: "
        "other processes share the cores and every figure will carry their time; calibrate "
        "on an idle machine"
    )


@click.command("calibrate")
@click.option(
    "--preset", default="small", show_default=True, help="workload whose shapes are timed"
)
@click.option(
    "--micro-batch",
    "micro_batch",
    default="1,2,4",
    show_default=True,
    help="comma-separated micro-batch sizes whose GEMM and activation shapes are timed",
)
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default="fp32",
    show_default=True,
    help="numerics of the timed operators and collectives",
)
@click.option(
    "--nproc-per-node",
    "nproc",
    default="1,2",
    show_default=True,
    help="comma-separated ranks per node: operators timed on that many ranks at once, "
    "collectives (from 2) measured with mtb comm over that many",
)
@click.option(
    "--device",
    type=click.Choice(("auto", "cpu", "cuda")),
    default="auto",
    show_default=True,
    help="device type (auto: cuda if present)",
)
@click.option(
    "--from-comm",
    multiple=True,
    metavar="FILE",
    help="also fit the curves of an mtb comm result (a multi-node one gives scope cluster); "
    "repeatable",
)
@click.option(
    "--comm-sizes",
    default="4K,64K,1M,8M",
    show_default=True,
    help="buffer sizes mtb comm measures (K, M, G: powers of 1024)",
)
@click.option(
    "--output",
    default="plan-profile.toml",
    show_default=True,
    help="profile TOML path; mtb comm's results are kept beside it as <stem>-comm-N.json "
    "(N ranks) and <stem>-comm-N-groups-of-G.json",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    help="wall-clock limit of each launch, in seconds",
)
@click.option(
    "--overheads/--no-overheads",
    default=True,
    show_default=True,
    help=(
        "measure each mechanism's fixed cost (tiny-width mtb runs at 1 and 2 micro-batches, "
        "--repeats times, per mechanism and N)"
    ),
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1, max=20),
    default=REPEATS,
    show_default=True,
    help="runs of each fixed-cost and full-width measurement, the fastest kept (more on a "
    "busy machine)",
)
def calibrate_command(
    preset,
    micro_batch,
    precision,
    nproc,
    device,
    from_comm,
    comm_sizes,
    output,
    timeout_s,
    overheads,
    repeats,
):
    """Measure this machine's device profile for the workload: operators and collectives.

    Times the workload's GEMMs (forward and backward), attention, element-wise
    operators, operator overhead and the AdamW step on N ranks at once for
    each --nproc-per-node N, fits latency and bus bandwidth of all_reduce,
    all_gather, reduce_scatter, all_to_all and send_recv from mtb comm runs,
    records memory capacity and each figure's method, measures each
    mechanism's fixed cost (base, ac, fsdp, rep, zero, zero3, tp, sp, pp, cp, ep)
    by running it at a negligible width, and writes the profile.
    """
    import time

    from mtb.api import check_output, plain_console, stdout, write_atomic
    from mtb_plan import curves
    from mtb_plan.calibrate import calibrate
    from mtb_plan.profile import to_toml

    micro_batches = positive_list("--micro-batch", micro_batch)
    ranks = positive_list("--nproc-per-node", nproc)
    check_preset(preset)
    check_sizes(comm_sizes)
    check_output("--output", output)
    for path in from_comm:
        curves.read_document(path)
    device = check_device(device, ranks)
    progress = plain_console(stderr=True)
    busy = busy_warning(os.getloadavg()[0], os.cpu_count() or 1) if device == "cpu" else None
    if busy:
        progress.print(f"mtb plan calibrate: {busy}")
    started = time.perf_counter()
    profile = calibrate(
        preset=preset,
        micro_batches=micro_batches,
        precision=precision,
        ranks_per_node=ranks,
        device=device,
        from_comm=from_comm,
        comm_sizes=comm_sizes,
        timeout_s=timeout_s,
        comm_prefix=str(Path(output).with_suffix("")),
        progress=lambda line: progress.print(f"mtb plan calibrate: {line}"),
        measure_overheads=overheads,
        repeats=repeats,
    )
    write_atomic(output, to_toml(profile))
    console = stdout if stdout.is_terminal else plain_console(width=WIDTH)
    for table in summary(profile):
        console.print(table)
    console.print(f"wrote {output} in {time.perf_counter() - started:.0f} s")
