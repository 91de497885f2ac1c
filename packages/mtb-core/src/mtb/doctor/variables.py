"""NCCL_*, GLOO_*, MASTER_* and TORCH_* variables, and the values known to hurt a run."""

import socket

from mtb.doctor.check import FAIL, OK, WARN, Check

AREA = "variables"
PREFIXES = ("NCCL_", "GLOO_", "MASTER_", "TORCH_")
# Switches that only make sense while debugging: each costs bandwidth or latency.
SLOW_SWITCHES = {
    "NCCL_P2P_DISABLE": "GPU peer-to-peer copies",
    "NCCL_SHM_DISABLE": "shared-memory transport between local ranks",
    "NCCL_IB_DISABLE": "InfiniBand/RoCE",
}
RENAMED = {
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
}


def relevant(environ: dict) -> dict:
    return {k: v for k, v in sorted(environ.items()) if k.startswith(PREFIXES)}


def _names_an_interface(entry: str, names: list[str], exact: bool) -> bool:
    if entry.startswith("="):
        return entry[1:] in names
    return entry in names if exact else any(n.startswith(entry) for n in names)


def interface_problem(variable: str, value: str, names: list[str]) -> str | None:
    """Why ``value`` selects no interface here, or None.

    NCCL reads entries as prefixes (``=name`` exact, a leading ``^`` excludes);
    gloo needs exact names.
    """
    if value.startswith("^"):
        return None
    exact = variable.startswith("GLOO_")
    entries = [e for e in value.split(",") if e]
    if any(_names_an_interface(e, names, exact) for e in entries):
        return None
    return f"{variable}={value} names no interface here (have: {', '.join(names)})"


def _port_problem(value: str) -> str | None:
    if value.isdigit() and 0 < int(value) < 65536:
        return None
    return f"MASTER_PORT={value} is not a port number (1-65535)"


def _address_problem(value: str) -> str | None:
    try:
        socket.getaddrinfo(value, None)
    except OSError as error:
        return f"MASTER_ADDR={value} does not resolve ({error.strerror or error})"
    return None


def findings(environ: dict, interface_names: list[str]) -> list[tuple[str, str, str]]:
    """(variable, status, message) for every risky value in ``environ``."""
    found = []
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if variable in environ:
            problem = interface_problem(variable, environ[variable], interface_names)
            if problem:
                found.append((variable, WARN, problem + "; unset it or name a listed one"))
    for variable, what in SLOW_SWITCHES.items():
        if environ.get(variable) == "1":
            found.append((variable, WARN, f"{variable}=1 turns off {what}: debugging only"))
    for old, new in RENAMED.items():
        if old in environ:
            found.append((old, WARN, f"{old} is no longer read by torch; set {new}"))
    if environ.get("NCCL_DEBUG", "").upper() == "TRACE":
        found.append(("NCCL_DEBUG", WARN, "NCCL_DEBUG=TRACE slows every collective; use INFO"))
    if environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        message = "TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective: timings are not real"
        found.append(("TORCH_DISTRIBUTED_DEBUG", WARN, message))
    if "MASTER_PORT" in environ and (problem := _port_problem(environ["MASTER_PORT"])):
        found.append(("MASTER_PORT", FAIL, problem))
    if "MASTER_ADDR" in environ and (problem := _address_problem(environ["MASTER_ADDR"])):
        found.append(("MASTER_ADDR", FAIL, problem))
    return found


def checks(environ: dict, interface_names: list[str]) -> list[Check]:
    variables = relevant(environ)
    shown = ", ".join(variables) or "none set"
    summary = Check(
        name="variables", area=AREA, status=OK, message=shown, details={"set": variables}
    )
    risky = [
        Check(name=variable, area=AREA, status=status, message=message)
        for variable, status, message in findings(environ, interface_names)
    ]
    return [summary, *risky]
