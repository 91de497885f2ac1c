"""The run's one DeviceMesh, built from its layout, and the sub-meshes strategies use."""

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


def build_mesh(context) -> DeviceMesh:
    """Every layout dimension on one mesh, in the layout's rank order (tp fastest)."""
    layout = context.layout
    return init_device_mesh(
        context.device.type, layout.mesh_shape, mesh_dim_names=layout.mesh_dim_names
    )


def dp_mesh(mesh: DeviceMesh, layout) -> DeviceMesh | None:
    """What FSDP2 shards over: dp_shard, or (dp_replicate, dp_shard) for HSDP; None for dp 1."""
    if layout.dp == 1:
        return None
    if layout.dp_replicate == 1:
        return mesh["dp_shard"]
    return mesh["dp_replicate", "dp_shard"]


def tp_mesh(mesh: DeviceMesh, layout) -> DeviceMesh | None:
    return mesh["tp"] if layout.tp > 1 else None
