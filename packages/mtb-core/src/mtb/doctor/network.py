"""Network interfaces and InfiniBand/RDMA devices: the paths collectives can take."""

import socket
from pathlib import Path

from mtb.doctor.check import OK, SKIPPED, WARN, Check

AREA = "network"
FAMILIES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6"}


def interfaces() -> dict:
    """Interface name -> addresses, MTU, speed (Mb/s) and whether it is up (psutil)."""
    import psutil

    addresses = psutil.net_if_addrs()
    stats = psutil.net_if_stats()
    table = {}
    for name in sorted(set(addresses) | set(stats)):
        stat = stats.get(name)
        table[name] = {
            "addresses": [
                {"family": FAMILIES[a.family], "address": a.address}
                for a in addresses.get(name, [])
                if a.family in FAMILIES
            ],
            "mtu": stat.mtu if stat else None,
            "speed_mbps": (stat.speed or None) if stat else None,
            "up": stat.isup if stat else None,
        }
    return table


def interface_check() -> Check:
    table = interfaces()
    routable = [n for n, i in table.items() if i["up"] and n != "lo" and i["addresses"]]
    shown = ", ".join(
        f"{n} ({', '.join(a['address'] for a in table[n]['addresses'])}, MTU {table[n]['mtu']})"
        for n in routable
    )
    if routable:
        message, status = f"up: {shown}", OK
    else:
        message = "no interface but loopback is up with an address: only one node can take part"
        status = WARN
    details = {"interfaces": table}
    return Check(name="interfaces", area=AREA, status=status, message=message, details=details)


def _read(path: Path) -> str | None:
    return path.read_text().strip() if path.exists() else None


def rdma_devices(root: Path = Path("/sys/class/infiniband")) -> dict:
    """RDMA device -> port -> state and rate, from sysfs."""
    return {
        device.name: {
            port.name: {"state": _read(port / "state"), "rate": _read(port / "rate")}
            for port in sorted((device / "ports").glob("*"))
        }
        for device in sorted(root.glob("*"))
    }


def _active(ports: dict) -> bool:
    return any("ACTIVE" in (port["state"] or "") for port in ports.values())


def rdma_check() -> Check:
    devices = rdma_devices()
    if not devices:
        reason = "no InfiniBand/RDMA device: inter-node traffic goes over TCP sockets"
        return Check(name="rdma", area=AREA, status=SKIPPED, message=reason)
    active = [name for name, ports in devices.items() if _active(ports)]
    status = OK if active else WARN
    message = f"{len(devices)} RDMA device(s), active: {', '.join(active) or 'none'}"
    details = {"devices": devices}
    return Check(name="rdma", area=AREA, status=status, message=message, details=details)


def checks() -> list[Check]:
    return [interface_check(), rdma_check()]
