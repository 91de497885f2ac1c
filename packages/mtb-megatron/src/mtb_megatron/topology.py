"""TP x PP topologies: parsing, the DP that follows from the world size, and the rank layout.

mtb computes the layout on its own, in Megatron's default order
``tp-cp-ep-dp-pp`` with context and expert parallelism 1: tensor-parallel
ranks are adjacent, pipeline stages outermost, so
``rank = tp_rank + TP x (dp_rank + DP x pp_rank)``. The topology check
compares megatron-core's groups with this independent answer.
"""

import attrs

from mtb.api import ConfigError


@attrs.frozen
class Topology:
    """Tensor- and pipeline-parallel sizes; data parallelism fills the rest of the world."""

    tp: int
    pp: int

    @property
    def name(self) -> str:
        return f"{self.tp}x{self.pp}"

    def dp(self, world_size: int, field: str = "topologies") -> int:
        """The data-parallel size, or a ConfigError when TP x PP does not divide the world."""
        if world_size % (self.tp * self.pp):
            raise ConfigError(
                field,
                f"{self.name} needs TP x PP = {self.tp * self.pp} to divide "
                f"the world size {world_size}",
            )
        return world_size // (self.tp * self.pp)


def parse_topology(text: str, field: str = "topology") -> Topology:
    """``2x4`` (TP x PP) into a Topology."""
    parts = text.strip().lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ConfigError(field, f"{text.strip()!r} is not TPxPP with sizes >= 1, e.g. 2x1")
    return Topology(int(parts[0]), int(parts[1]))


def parse_topologies(text: str, field: str = "topologies") -> list[Topology]:
    """``1x1,2x1,2x2`` into topologies, in the given order, without repeats."""
    items = [part for part in text.split(",") if part.strip()]
    if not items:
        raise ConfigError(field, "give at least one TPxPP topology, e.g. 1x1,2x1")
    return list(dict.fromkeys(parse_topology(item, field) for item in items))


def all_topologies(world_size: int) -> list[Topology]:
    """Every TP x PP whose product divides the world size (TP first, then PP)."""
    divisors = [n for n in range(1, world_size + 1) if world_size % n == 0]
    return [Topology(tp, pp) for tp in divisors for pp in divisors if world_size % (tp * pp) == 0]


def coordinates(topology: Topology, world_size: int, rank: int) -> dict:
    """A rank's (tp, dp, pp) ranks in the layout."""
    dp = topology.dp(world_size)
    return {
        "tp_rank": rank % topology.tp,
        "dp_rank": rank // topology.tp % dp,
        "pp_rank": rank // (topology.tp * dp),
    }


def _rank(topology: Topology, dp: int, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
    return tp_rank + topology.tp * (dp_rank + dp * pp_rank)


def layout(topology: Topology, world_size: int, rank: int) -> dict:
    """What a rank should see: its coordinates and the members of its TP, PP and DP groups."""
    dp = topology.dp(world_size)
    at = coordinates(topology, world_size, rank)
    t, d, p = at["tp_rank"], at["dp_rank"], at["pp_rank"]
    return {
        **at,
        "tp_group": [_rank(topology, dp, i, d, p) for i in range(topology.tp)],
        "pp_group": [_rank(topology, dp, t, d, i) for i in range(topology.pp)],
        "dp_group": [_rank(topology, dp, t, i, p) for i in range(dp)],
    }
