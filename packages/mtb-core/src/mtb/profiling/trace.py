"""One rank's Chrome trace, read back and analysed: operators, ranges, timelines.

Everything is computed from the trace file itself, so a trace opened in
Perfetto and the summary describe the same events. With device kernels
(CUDA) the compute/communication timeline is the device's, as Holistic
Trace Analysis measures it; on CPU it is the host's: operators on the
training threads against the collectives on gloo's worker threads.
"""

import gzip
import json
import re
from collections import defaultdict

from mtb.profiling.intervals import intersection, length, merge, overlap_ratio

COMM_PATTERN = re.compile(r"nccl|gloo|c10d|record_param_comms", re.IGNORECASE)
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: the device-side copies of record_function ranges (ProfilerStep#N, mtb.forward, nccl:...)
#: that CUDA traces carry beside the host's: read once, from the host
DEVICE_ANNOTATION = "gpu_user_annotation"
STEP_PREFIX = "ProfilerStep#"
RANGE_PREFIX = "mtb."


def is_comm(name: str) -> bool:
    """A collective or point-to-point operation, by its nccl, gloo or c10d name."""
    return bool(COMM_PATTERN.search(name))


def load(path) -> dict:
    """A Chrome trace from ``path`` (``.json`` or ``.json.gz``)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def complete_events(trace: dict) -> list[dict]:
    """The trace's duration events ("X"), less the device-side copies of host ranges."""
    return [
        e
        for e in trace.get("traceEvents", [])
        if e.get("ph") == "X"
        and isinstance(e.get("dur"), int | float)
        and "ts" in e
        and e.get("cat") != DEVICE_ANNOTATION
    ]


def span(event: dict) -> tuple[float, float]:
    return float(event["ts"]), float(event["ts"]) + float(event["dur"])


def parents(ops: list[dict]) -> list[int | None]:
    """Each operator's directly enclosing operator on its thread (an index), or None."""
    result: list[int | None] = [None] * len(ops)
    by_thread = defaultdict(list)
    for index, op in enumerate(ops):
        by_thread[(op.get("pid"), op.get("tid"))].append(index)
    for indices in by_thread.values():
        indices.sort(key=lambda i: (float(ops[i]["ts"]), -float(ops[i]["dur"])))
        stack: list[int] = []
        for i in indices:
            start, end = span(ops[i])
            while stack and span(ops[stack[-1]])[1] <= start:
                stack.pop()
            if stack and end <= span(ops[stack[-1]])[1]:
                result[i] = stack[-1]
            stack.append(i)
    return result


def self_times(ops: list[dict]) -> list[float]:
    """Each operator's duration less its direct child operators', per thread."""
    result = [float(op["dur"]) for op in ops]
    for op, parent in zip(ops, parents(ops), strict=True):
        if parent is not None:
            result[parent] -= float(op["dur"])
    return result


def entangled(ops: list[dict]) -> set[int]:
    """Operators that enclose a communication operator on their thread, or lie inside one.

    An enclosing operator (autograd's ``AccumulateGrad`` function for a DDP
    bucket, FSDP's post-backward hook) issues the collective and may wait for
    it, and an operator inside the collective is the collective's own work:
    neither is compute that runs beside the communication.
    """
    parent = parents(ops)
    found = set()
    for i, op in enumerate(ops):
        chain, j = [], parent[i]
        while j is not None:
            chain.append(j)
            j = parent[j]
        if is_comm(op["name"]):
            found.update(chain)
        elif any(is_comm(ops[j]["name"]) for j in chain):
            found.add(i)
    return found


def _top(table: dict, key: str, top: int) -> list[dict]:
    rows = [{"name": name, **values} for name, values in table.items()]
    return sorted(rows, key=lambda row: (-row[key], row["name"]))[:top]


def top_cpu_ops(ops: list[dict], top: int) -> list[dict]:
    """Operators by self CPU time (ms), with call counts and inclusive time."""
    table: dict = defaultdict(lambda: {"count": 0, "self_cpu_ms": 0.0, "cpu_total_ms": 0.0})
    for op, self_us in zip(ops, self_times(ops), strict=True):
        row = table[op["name"]]
        row["count"] += 1
        row["self_cpu_ms"] += self_us / 1000.0
        row["cpu_total_ms"] += float(op["dur"]) / 1000.0
    return _top(table, "self_cpu_ms", top)


def top_device_ops(device: list[dict], top: int) -> list[dict]:
    """Device kernels, copies and memsets by device time (ms)."""
    table: dict = defaultdict(lambda: {"count": 0, "device_ms": 0.0})
    for event in device:
        row = table[event["name"]]
        row["count"] += 1
        row["device_ms"] += float(event["dur"]) / 1000.0
    return _top(table, "device_ms", top)


def comm_ops(events: list[dict]) -> list[dict]:
    """Communication events by name: count and total time, host and device alike."""
    table: dict = defaultdict(lambda: {"count": 0, "total_ms": 0.0, "timeline": "cpu"})
    for event in events:
        row = table[event["name"]]
        row["count"] += 1
        row["total_ms"] += float(event["dur"]) / 1000.0
        if event.get("cat") in DEVICE_CATEGORIES:
            row["timeline"] = "device"
    return _top(table, "total_ms", len(table))


def timelines(events: list[dict], device: list[dict]) -> tuple[str, list, list]:
    """The timeline used for overlap and its compute and communication intervals.

    On CPU, compute is every ``cpu_op`` that can run beside the communication:
    not a communication operator, not on a thread that runs collectives
    (gloo's workers), and not :func:`entangled` with a collective.
    """
    kernels = [e for e in device if e.get("cat") == "kernel"]
    if kernels:
        compute = [span(e) for e in kernels if not is_comm(e["name"])]
        comm = [span(e) for e in kernels if is_comm(e["name"])]
        return "device", compute, comm
    comm_events = [e for e in events if e.get("cat") != "Trace" and is_comm(e["name"])]
    comm_threads = {
        (e.get("pid"), e.get("tid")) for e in comm_events if e.get("cat") == "user_annotation"
    }
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    excluded = entangled(ops)
    compute = [
        span(e)
        for i, e in enumerate(ops)
        if i not in excluded
        and not is_comm(e["name"])
        and (e.get("pid"), e.get("tid")) not in comm_threads
    ]
    return "cpu", compute, [span(e) for e in comm_events]


def overlap_of(compute: list, comm: list) -> dict:
    """HTA overlap, or ``undetermined`` with the reason when the events are missing."""
    ratio = overlap_ratio(compute, comm)
    if ratio is None:
        reason = "the trace holds no communication events (one rank, or no collectives)"
        return {"status": "undetermined", "ratio": None, "reason": reason}
    if not compute:
        reason = "the trace holds no compute events on the chosen timeline"
        return {"status": "undetermined", "ratio": None, "reason": reason}
    return {"status": "measured", "ratio": ratio, "reason": None}


def ranges_ms(events: list[dict]) -> dict:
    """Total milliseconds inside each named mtb range (``mtb.forward`` -> ``forward``)."""
    totals: dict = defaultdict(float)
    for event in events:
        if event["name"].startswith(RANGE_PREFIX):
            totals[event["name"][len(RANGE_PREFIX) :]] += float(event["dur"]) / 1000.0
    return dict(totals)


def exposed_per_step(windows: list, compute: list, comm: list) -> list[float]:
    """Per step window, communication time (ms) not hidden behind compute."""
    exposed = []
    for window in windows:
        comm_in = intersection(comm, [window])
        hidden = intersection(intersection(compute, [window]), comm_in)
        exposed.append((length(comm_in) - length(hidden)) / 1000.0)
    return exposed


def analyse(trace: dict, top: int = 15) -> dict:
    """This rank's summary of one trace: the raw material the cross-rank summary combines."""
    events = complete_events(trace)
    info = trace.get("distributedInfo") or {}
    device = [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    steps = sorted((e for e in events if e["name"].startswith(STEP_PREFIX)), key=span)
    timeline, compute, comm = timelines(events, device)
    step_ms = [float(e["dur"]) / 1000.0 for e in steps]
    exposed = exposed_per_step([span(e) for e in steps], compute, comm)
    comm_ms = length(comm) / 1000.0
    overlap = overlap_of(compute, comm)
    overlap_ms = comm_ms * (overlap["ratio"] or 0.0)  # no compute or no comm: none hidden
    return {
        "rank": info.get("rank", 0),
        "backend": info.get("backend"),
        "timeline": timeline,
        "steps": len(steps),
        "step_ms": step_ms,
        "work_ms": [ms - hidden for ms, hidden in zip(step_ms, exposed, strict=True)],
        "ranges_ms": ranges_ms(events),
        "compute_ms": length(merge(compute)) / 1000.0,
        "comm_ms": comm_ms,
        "overlap_ms": overlap_ms,
        "exposed_comm_ms": comm_ms - overlap_ms,
        "overlap": overlap,
        "top_cpu_ops": top_cpu_ops(ops, top),
        "top_device_ops": top_device_ops(device, top),
        "comm_ops": comm_ops([e for e in events if e.get("cat") != "Trace" and is_comm(e["name"])]),
    }
