"""Test strategy ``test-pp``: the pipeline engine alone, on a mesh of the run's layout."""

from mtb import hookimpl
from mtb.api import Strategy


class PipelineOnly(Strategy):
    name = "test-pp"
    parallel_dims = ("pp",)

    def setup(self, model, make_optimizer, context):
        from torch.distributed.device_mesh import init_device_mesh

        from mtb_strategies.pipeline_engine import PipelineEngine

        layout = context.layout
        mesh = init_device_mesh(
            context.device.type, layout.mesh_shape, mesh_dim_names=layout.mesh_dim_names
        )
        return PipelineEngine.build(model, make_optimizer, context, mesh.get_group("pp"))


@hookimpl
def mtb_register_strategies(register):
    register(PipelineOnly())
