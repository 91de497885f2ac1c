"""``dcp``: model and optimizer through torch.distributed.checkpoint, sharded as they live.

get_state_dict/set_state_dict give FQN-keyed state for plain, DDP and FSDP2
modules alike, so a checkpoint reshards: DCP reads whatever slice each rank
of the loading run needs.
"""

import warnings
from pathlib import Path

from mtb.checkpoint.backend import CheckpointBackend
from mtb.hookspecs import hookimpl

PAYLOAD = "dcp"


# Without a process group DCP warns that it assumes one process: that is what we
# intend. A filter, not a context manager: async saves warn on DCP's own thread.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")


def _options(engine):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(**engine.state_dict_options)


def _state(engine) -> dict:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(
        engine.model, engine.optimizer, options=_options(engine)
    )
    return {"model": model_state, "optimizer": optimizer_state}


class DcpBackend(CheckpointBackend):
    name = "dcp"
    description = "torch.distributed.checkpoint: sharded, reshards across world sizes"

    def supports(self, strategy) -> bool:
        return getattr(strategy, "checkpoint_backend", "dcp") == "dcp"

    def save(self, engine, directory: Path, context, asynchronous=False, group=None):
        import torch.distributed.checkpoint as dcp

        target = str(directory / PAYLOAD)
        if asynchronous:
            return dcp.async_save(_state(engine), checkpoint_id=target, process_group=group)
        dcp.save(_state(engine), checkpoint_id=target)
        return None

    def load(self, engine, directory: Path, context) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = _state(engine)
        dcp.load(state, checkpoint_id=str(directory / PAYLOAD))
        set_state_dict(
            engine.model,
            engine.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
            options=_options(engine),
        )

    def optimizer_state(self, engine) -> dict:
        return _state(engine)["optimizer"]


@hookimpl
def mtb_register_checkpoint_backends(register):
    register(DcpBackend())
