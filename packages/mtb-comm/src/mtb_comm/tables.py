"""The rich tables the commands print on stdout, one per document kind."""

from rich.table import Table


def _num(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _size(nbytes: int) -> str:
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale}{unit}"
    return str(nbytes)


PLACES = {"in_place": "ip", "out_of_place": "oop"}


def comm_table(document: dict) -> Table:
    """One row per case, nccl-tests style (ip: in-place, oop: out-of-place)."""
    env, config = document["environment"], document["config"]
    group = document.get("group_size") or env["world_size"]
    groups = f" in groups of {group} at once" if group != env["world_size"] else ""
    table = Table(
        title=f"mtb comm: {env['world_size']} ranks{groups}, {env['device']} / "
        f"{env['backend']}, {config['dtype']}"
    )
    for name in ("operation", "place", "size"):
        table.add_column(name)
    for name in ("time us", "avg us", "p50 us", "algbw GB/s", "busbw GB/s", "wrong", "imbal."):
        table.add_column(name, justify="right")
    for m in document["measurements"]:
        wrong = "skipped" if m["status"] == "skipped" else str(m["wrong_elements"])
        table.add_row(
            m["operation"] + (f" {m['mode']}" if m["mode"] else ""),
            PLACES[m["placement"]],
            _size(m["bytes"]),
            _num(m["time_us"], 1),
            _num(m["time_avg_us"], 1),
            _num(m["time_p50_us"], 1),
            _num(m["algbw_gbps"], 3),
            _num(m["busbw_gbps"], 3),
            wrong,
            _num(m["imbalance"]) if m["mode"] == "uneven" else "",
        )
    return table


def tp_table(document: dict) -> Table:
    env = document["environment"]
    table = Table(title=f"mtb tp {document['config']['check']}: {env['world_size']} ranks")
    for name in ("check", "dtype", "tensor"):
        table.add_column(name)
    for name in ("max abs error", "max rel error", "tolerance", "ok"):
        table.add_column(name, justify="right")
    for t in document["tensors"]:
        table.add_row(
            t["check"],
            t["dtype"],
            t["tensor"],
            f"{t['max_abs_error']:.2e}",
            f"{t['max_rel_error']:.2e}",
            f"{t['tolerance']:.0e}",
            "yes" if t["ok"] else "NO",
        )
    return table


def moe_table(document: dict) -> Table:
    moe, cfg = document["moe"], document["config"]
    table = Table(
        title=f"mtb moe route: top-{cfg['top_k']}, {cfg['experts']} experts, "
        f"{document['environment']['world_size']} ranks"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("tokens (all ranks)", str(moe["tokens"])),
        ("capacity per expert per rank", str(moe["capacity_per_rank"])),
        ("assigned per expert", str(moe["assigned_per_expert"])),
        ("kept per expert", str(moe["kept_per_expert"])),
        ("dropped", str(moe["dropped"])),
        ("imbalance (max/mean, assigned)", _num(moe["imbalance"], 3)),
        ("load-balancing loss", _num(moe["load_balancing_loss"], 4)),
        ("dispatch us", _num(moe["dispatch_time_us"], 1)),
        ("combine us", _num(moe["combine_time_us"], 1)),
        ("max abs error", f"{moe['max_abs_error']:.2e}"),
        ("wrong elements", str(moe["wrong_elements"])),
    ]
    for row in rows:
        table.add_row(*row)
    return table
