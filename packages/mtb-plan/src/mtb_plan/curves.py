"""Collective curves from ``mtb comm`` result documents: run it, read it, fit it.

mtb-plan never imports mtb-comm: it runs ``mtb comm`` as a command and reads
the JSON document it writes. A document's ``bytes`` is already nccl-tests'
size for every operation (the send buffer of all_reduce and send_recv, the
receive buffer of all_gather, the send buffer of reduce_scatter and
all_to_all: docs/comm.md), which is the size ``Curve.time_s`` takes, so
points are fitted as they stand: time = latency + bytes x factor / busbw.
"""

import json
import subprocess
import sys
from pathlib import Path

from mtb.api import RunFailed, UsageError
from mtb_plan.profile import BUS_FACTORS, Curve

#: what calibrate asks ``mtb comm`` for (broadcast is not used by any layout's step)
OPERATIONS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
COMM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(latency_s, seconds per byte) of time = latency + x * slope, by relative least squares.

    Each point is (bytes x bus factor, seconds). Residuals are divided by the
    measured time, so the small sizes (which fix the latency) count as much as
    the large ones (which fix the bandwidth). A negative latency (noise at the
    small sizes) is clamped to zero and the slope refitted through the origin.
    A slope that is not positive (times flat over the sizes: none was large
    enough to be bandwidth-bound) gives the bandwidth's lower bound, the
    largest size over its time, and the latency that fits best beside it.
    """
    weights = [1 / t**2 for _, t in points]
    sw = sum(weights)
    sx = sum(w * x for w, (x, _) in zip(weights, points, strict=True))
    sy = sum(w * t for w, (_, t) in zip(weights, points, strict=True))
    sxx = sum(w * x * x for w, (x, _) in zip(weights, points, strict=True))
    sxy = sum(w * x * t for w, (x, t) in zip(weights, points, strict=True))
    det = sw * sxx - sx * sx
    latency, slope = ((sxx * sy - sx * sxy) / det, (sw * sxy - sx * sy) / det) if det else (-1, 0)
    if slope <= 0:
        largest = max(points)
        slope = largest[1] / largest[0]
        latency = max(0.0, (sy - slope * sx) / sw)
    elif latency < 0:
        latency, slope = 0.0, sxy / sxx
    return latency, slope


def nodes_of(document: dict) -> int:
    """The nodes the run spanned (its ``--nnodes``, or its distinct hosts)."""
    nnodes = document.get("config", {}).get("launch", {}).get("nnodes", 1)
    hosts = set(document.get("environment", {}).get("hostnames", []))
    return max(nnodes, len(hosts), 1)


def points_of(document: dict, operation: str) -> list[tuple[int, float]]:
    """(bytes, seconds) of the operation's checked rows (equal all_to_all splits only).

    The time is the median over iterations of each iteration's slowest rank
    (``time_p50_us``): on a shared CPU a few descheduled iterations move the
    mean far more than the cost of the collective.
    """
    return [
        (m["bytes"], m["time_p50_us"] * 1e-6)
        for m in document.get("measurements", [])
        if m["operation"] == operation and m["status"] == "ok" and m["mode"] in (None, "equal")
    ]


def curves_of(document: dict, source: str) -> list[Curve]:
    """One fitted curve per operation the document measured, with how it was measured:
    over each group of ``--group-size`` consecutive ranks (all of them by default), within
    a node where a group fits in one (with the node's ranks running), else across nodes."""
    world, config = document["environment"]["world_size"], document["config"]
    group = config.get("group_size") or world
    per_node = world // nodes_of(document)
    scope = "node" if group <= per_node else "cluster"  # groups are consecutive ranks
    running = per_node if scope == "node" else None
    curves = []
    for operation in OPERATIONS:
        points = points_of(document, operation)
        if group < 2 or len(points) < 2:
            continue
        factor = BUS_FACTORS[operation](group)
        latency, slope = fit([(b * factor, t) for b, t in points])
        sizes = ",".join(str(b) for b in sorted({b for b, _ in points}))
        how = (
            f"mtb comm {source}: {operation}, {_groups(group, world)}, {config.get('dtype')}, "
            f"sizes {sizes} B, each point the median over {config.get('iters')} timed calls "
            f"(after {config.get('warmup')} warm-up) of the slowest rank's time; time = latency "
            f"+ bytes x {factor:.4g} / busbw fitted by relative least squares over "
            f"{len(points)} points"
        )
        curves.append(
            Curve(
                collective=operation,
                group_size=group,
                scope=scope,
                ranks_per_node=running,
                latency_s=latency,
                bus_bandwidth_bytes_per_s=1 / slope,
                how=how,
            )
        )
    return curves


def _groups(group: int, world: int) -> str:
    if group == world:
        return f"{group} ranks"
    return f"{world // group} groups of {group} ranks at once"


def read_document(path: str | Path, flag: str = "--from-comm") -> dict:
    """An ``mtb comm`` document, or one line naming the file and what is wrong."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise UsageError(f"{flag}: cannot read {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"{flag}: {path} is not JSON: {error}") from None
    if not isinstance(document, dict) or document.get("kind") != "comm":
        raise UsageError(f"{flag}: {path} is not an `mtb comm` result (kind comm)")
    if document.get("status") != "ok":
        raise UsageError(f"{flag}: {path} has status {document.get('status')!r}, not ok")
    return document


def comm_command(
    nproc: int, sizes: str, precision: str, device: str, timeout_s: float, output, group: int
):
    """The ``mtb comm`` command line calibrate runs for one group size on ``nproc`` ranks."""
    return [
        *(sys.executable, "-m", "mtb", "comm", "--operations", ",".join(OPERATIONS)),
        *("--all-to-all-mode", "equal", "--sizes", sizes, "--dtype", COMM_DTYPES[precision]),
        *("--warmup", "3", "--iters", "10", "--nproc-per-node", str(nproc), "--device", device),
        *("--group-size", str(group), "--timeout", str(int(timeout_s)), "--output", str(output)),
    ]


def run_comm(
    nproc: int, sizes: str, precision: str, device: str, timeout_s: float, output, group: int
):
    """Run ``mtb comm`` on ``nproc`` local ranks in groups of ``group``; its document."""
    command = comm_command(nproc, sizes, precision, device, timeout_s, output, group)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 30)
    except subprocess.TimeoutExpired:
        raise RunFailed(
            f"mtb comm at {nproc} ranks (groups of {group}) did not finish in {timeout_s:.0f} s"
        ) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        if "No such command 'comm'" in last:
            raise UsageError("calibrate measures collectives with `mtb comm`: pip install mtb-comm")
        raise RunFailed(
            f"mtb comm at {nproc} ranks (groups of {group}) failed (exit {done.returncode}): {last}"
        )
    return read_document(output, flag="mtb comm")
