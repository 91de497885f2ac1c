"""The run's one DeviceMesh, built from its layout, and the sub-meshes strategies use."""

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh


def build_mesh(context) -> DeviceMesh:
    """Every layout dimension on one mesh, in the layout's rank order (tp fastest)."""
    layout = context.layout
    return init_device_mesh(
        context.device.type, layout.mesh_shape, mesh_dim_names=layout.mesh_dim_names
    )


def dp_mesh(mesh: DeviceMesh, layout) -> DeviceMesh | None:
    """What FSDP2 shards over: dp_shard, or (dp_replicate, dp_shard) for HSDP; None for dp 1.

    Context-parallel ranks hold the same parameters and each computes the
    gradient of its share of the tokens, so they join the shard dimension
    (``dp_shard_cp``, as torchtitan does): FSDP's averaging reduce-scatter
    then averages over both, which is the mean over every token.
    """
    if layout.dp * layout.cp == 1:
        return None
    shard = "dp_shard"
    if layout.cp > 1:
        shard = "dp_shard_cp"
        mesh["dp_shard", "cp"]._flatten(shard)
    if layout.dp_replicate == 1:
        return mesh[shard]
    return mesh["dp_replicate", shard]


def cp_ring(mesh: DeviceMesh, context):
    """The ring attention runs over: the cp group; None for cp 1."""
    if context.layout.cp == 1:
        return None
    from mtb_strategies.context_parallel import Ring

    seq_len = context.config.model.seq_len
    return Ring.of(mesh["cp"].get_group(), seq_len, context.device)


def tp_mesh(mesh: DeviceMesh, layout) -> DeviceMesh | None:
    return mesh["tp"] if layout.tp > 1 else None
