"""The rank side of every command: join the group, measure, gather to rank 0, leave."""

import functools
import socket
import warnings


def _environment(context, hostnames: list[str]) -> dict:
    import torch

    return {
        "world_size": context.world_size,
        "device": context.device.type,
        "backend": context.backend,
        "hostnames": hostnames,
        "torch_threads": torch.get_num_threads(),
    }


def run(spec, measure):
    """``measure(context, spec)`` on this rank; rank 0 returns (environment, per-rank values).

    The environment carries ``nodes``, each node's provenance, for the document's
    provenance block.
    """
    from mtb.api import distributed

    # torch 2.13 points all_gather_into_tensor / reduce_scatter_tensor users to new names
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.distributed")
    context = distributed.setup(spec)
    if not context.distributed:
        raise RuntimeError("mtb-comm workers need a process group (launch, or torchrun)")
    from mtb.api import node_provenance

    value = measure(context, spec)
    gathered = distributed.gather(context, (socket.gethostname(), value))
    nodes = node_provenance(context)
    distributed.teardown(context)
    if not context.is_main:
        return None
    hostnames = [host for host, _ in gathered]
    return {**_environment(context, hostnames), "nodes": nodes}, [v for _, v in gathered]


def for_measure(measure):
    """A picklable worker function for the launcher (spawned workers import it by name)."""
    return functools.partial(run, measure=measure)
