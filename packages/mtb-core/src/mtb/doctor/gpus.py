"""GPUs as torch and NVML see them: model, memory, capability, MIG, driver, peer access."""

from mtb.doctor.check import OK, SKIPPED, WARN, Check

AREA = "gpu"


def _nvml() -> dict:
    """Driver and per-device MIG mode through NVML (nvidia-ml-py), when installed."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py is not installed (mtb-core[gpu])"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return {"available": False, "reason": f"NVML: {error}"}
    try:
        migs: list[bool | None] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                current, _ = pynvml.nvmlDeviceGetMigMode(handle)
                migs.append(bool(current))
            except pynvml.NVMLError:
                migs.append(None)  # the device does not support MIG
        return {"available": True, "driver": pynvml.nvmlSystemGetDriverVersion(), "mig": migs}
    finally:
        pynvml.nvmlShutdown()


def _devices(torch, mig: list) -> list[dict]:
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append(
            {
                "index": index,
                "name": props.name,
                "memory_bytes": props.total_memory,
                "compute_capability": f"{props.major}.{props.minor}",
                "mig": mig[index] if index < len(mig) else None,
            }
        )
    return devices


def _peer_matrix(torch) -> list[list[bool]]:
    count = torch.cuda.device_count()
    return [
        [i == j or torch.cuda.can_device_access_peer(i, j) for j in range(count)]
        for i in range(count)
    ]


def gpus() -> Check:
    import torch

    if not torch.cuda.is_available():
        reason = "no CUDA device (CPU build of torch)" if not torch.version.cuda else "no GPU seen"
        return Check(name="gpus", area=AREA, status=SKIPPED, message=reason)
    nvml = _nvml()
    devices = _devices(torch, nvml.get("mig", []))
    peers = _peer_matrix(torch)
    details = {"devices": devices, "peer_access": peers, "nvml": nvml}
    names = sorted({d["name"] for d in devices})
    message = f"{len(devices)} x {', '.join(names)}, driver {nvml.get('driver', 'unknown')}"
    missing = [(i, j) for i, row in enumerate(peers) for j, ok in enumerate(row) if not ok]
    status = OK
    if missing:
        status = WARN
        message += f"; no peer access between {len(missing)} device pairs (NCCL goes through host)"
    if any(d["mig"] for d in devices):
        status = WARN
        message += "; MIG is on: NCCL cannot span MIG instances"
    return Check(name="gpus", area=AREA, status=status, message=message, details=details)


def checks() -> list[Check]:
    return [gpus()]
