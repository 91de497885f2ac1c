"""``mtb megatron topology``: megatron-core's parallel groups against mtb's own layout.

Every rank joins one gloo group on the CPU, and for each topology runs
megatron-core's ``initialize_model_parallel`` and reads back its TP, PP and
DP groups and ranks; rank 0 gathers them and the command compares each rank
with :func:`mtb_megatron.topology.layout`. Real megatron-core code, no GPU.
"""

import warnings

import attrs

from mtb.api import LaunchConfig
from mtb_megatron.topology import Topology, layout

GROUPS = ("tp_group", "pp_group", "dp_group")
RANKS = ("tp_rank", "pp_rank", "dp_rank")


@attrs.frozen
class Spec:
    """What the ranks need: the launch (core's distributed.setup reads it) and the topologies."""

    launch: LaunchConfig
    topologies: tuple[tuple[int, int], ...]


def _megatron_view(parallel_state, group_ranks) -> dict:
    return {
        "tp_group": group_ranks(parallel_state.get_tensor_model_parallel_group()),
        "pp_group": group_ranks(parallel_state.get_pipeline_model_parallel_group()),
        "dp_group": group_ranks(parallel_state.get_data_parallel_group()),
        "tp_rank": parallel_state.get_tensor_model_parallel_rank(),
        "pp_rank": parallel_state.get_pipeline_model_parallel_rank(),
        "dp_rank": parallel_state.get_data_parallel_rank(),
    }


def rank_worker(spec: Spec):
    """On each rank: megatron-core's view of every topology; rank 0 returns all ranks' views."""
    warnings.filterwarnings("ignore")  # megatron-core warns that TE and Apex are absent
    import torch.distributed as dist
    from megatron.core import parallel_state

    from mtb.api import distributed

    context = distributed.setup(spec)
    views = []
    for tp, pp in spec.topologies:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp
        )
        views.append(_megatron_view(parallel_state, dist.get_process_group_ranks))
        parallel_state.destroy_model_parallel()
    gathered = distributed.gather(context, views)
    distributed.teardown(context)
    return gathered if context.is_main else None


def compare(topology: Topology, world_size: int, views: list[dict]) -> dict:
    """One topology's row: each rank's groups and ranks, megatron-core's against mtb's."""
    ranks, mismatches = [], 0
    for rank, seen in enumerate(views):
        expected = layout(topology, world_size, rank)
        wrong = [key for key in (*GROUPS, *RANKS) if list_or(seen[key]) != list_or(expected[key])]
        mismatches += len(wrong)
        ranks.append({"rank": rank, "megatron_core": seen, "expected": expected, "wrong": wrong})
    return {
        "topology": topology.name,
        "tp": topology.tp,
        "pp": topology.pp,
        "dp": topology.dp(world_size),
        "ranks_checked": len(views),
        "mismatches": mismatches,
        "ok": mismatches == 0 and len(views) == world_size,
        "ranks": ranks,
    }


def list_or(value):
    """Groups compare as sorted lists (megatron-core returns them ordered, but need not)."""
    return sorted(value) if isinstance(value, list) else value


def _megatron_core_installed() -> bool:
    """Found without importing it (the import takes seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec("megatron.core") is not None
    except ModuleNotFoundError:  # no "megatron" package at all
        return False


def execute(config, plugins: list[dict]) -> dict:
    """Spawn the ranks, gather megatron-core's views, compare; the megatron result document."""
    from importlib.metadata import version

    from mtb.api import (
        LaunchTimeout,
        RunFailed,
        UsageError,
        document_provenance,
        result_document,
        run_function,
        utc_now,
    )

    if not _megatron_core_installed():
        raise UsageError(
            "megatron-core is not installed: pip install 'mtb-megatron[megatron-core]'"
        )
    started = utc_now()
    launch = attrs.evolve(
        config.launch, nproc_per_node=config.world_size, device="cpu", backend="gloo"
    )
    spec = Spec(launch, tuple((t.tp, t.pp) for t in config.topologies))
    try:
        gathered = run_function(launch, rank_worker, spec)
        error = None
    except (LaunchTimeout, RunFailed) as failure:
        gathered, error = None, str(failure)
    checks = []
    if gathered is not None:
        checks = [
            compare(topology, config.world_size, [views[i] for views in gathered])
            for i, topology in enumerate(config.topologies)
        ]
        wrong = [c["topology"] for c in checks if not c["ok"]]
        if wrong:
            error = f"megatron-core's groups differ from mtb's layout for {', '.join(wrong)}"
    return result_document(
        "megatron",
        status="ok" if error is None else "failed",
        error=error,
        mode="topology",
        config={
            "world_size": config.world_size,
            "topologies": [t.name for t in config.topologies],
            "output": config.output,
            "launch": attrs.asdict(launch),
        },
        megatron_core={"version": version("megatron-core")},
        layout_order="tp-cp-ep-dp-pp",
        checks=checks,
        plugins=plugins,
        provenance=document_provenance(plugins, started=started),
    )
