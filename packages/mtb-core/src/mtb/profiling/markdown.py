"""profile_summary.md: the profile summary as tables a reviewer reads in a diff."""


def _num(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, float) else str(value)


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _verdict(part: dict, measured: str) -> str:
    if part["status"] == "measured":
        return measured
    return f"{part['status']} ({part['reason']})"


def _ops(title: str, part, measure: str) -> list[str]:
    if isinstance(part, dict):
        return [f"## {title}", "", _verdict(part, ""), ""]
    rows = [[f"`{op['name']}`", op["count"], _num(op[measure], 3)] for op in part]
    return [f"## {title}", "", *_table(["operator", "count", f"{measure} (all ranks)"], rows)]


def render(profile: dict) -> str:
    """The summary's headline, per-rank step breakdown and operator tables."""
    steps, strag, overlap = profile["step_time_ms"], profile["straggler"], profile["overlap"]
    cost = profile["overhead"]
    lines = [
        f"# Profile: {profile['strategy']}, world size {profile['world_size']}",
        "",
        f"- profiled steps: {profile['profiled_steps']} per rank; timeline: {profile['timeline']}",
        "- step time across ranks (ms): "
        + _verdict(
            steps,
            f"min {_num(steps.get('min'))}, p50 {_num(steps.get('p50'))}, "
            f"max {_num(steps.get('max'))}",
        ),
        "- straggler: "
        + _verdict(
            strag,
            f"rank {strag.get('slowest_rank')}, ratio {_num(strag.get('ratio'), 3)} "
            f"(max/p50 of {strag.get('basis')})",
        ),
        "- compute/communication overlap: " + _verdict(overlap, _pct(overlap.get("ratio"))),
        "- profiler overhead: "
        + _verdict(
            cost,
            f"{_pct(cost.get('overhead_ratio'))} "
            f"(p50 step {_num(cost.get('baseline_step_ms_p50'))} ms unprofiled, "
            f"{_num(cost.get('profiled_step_ms_p50'))} ms profiled)",
        ),
        "",
        "## Per rank (ms per step)",
        "",
    ]
    names = sorted({name for row in profile["per_rank"] for name in row["breakdown_ms"]})
    header = ["rank", "step", *names, "collective", "exposed comm", "work", "overlap"]
    body = [
        [
            row["rank"],
            _num(row["step_ms"]),
            *(_num(row["breakdown_ms"].get(name)) for name in names),
            _num(row["collective_ms"]),
            _num(row["exposed_comm_ms"]),
            _num(row["work_ms"]),
            _verdict(row["overlap"], _pct(row["overlap"]["ratio"])),
        ]
        for row in profile["per_rank"]
    ]
    lines += _table(header, body)
    lines += _ops("Top operators by self CPU time", profile["top_cpu_ops"], "self_cpu_ms")
    lines += _ops("Top operators by device time", profile["top_device_ops"], "device_ms")
    lines += _ops("Communication operators", profile["comm_ops"], "total_ms")
    return "\n".join(lines)
