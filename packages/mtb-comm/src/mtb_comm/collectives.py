"""Buffers, one call and the expected result of each collective, out-of-place and in-place.

Inputs follow a pattern whose sums stay small integers, exact in every
dtype offered, so a result is either right or wrong element by element.
In-place follows nccl-tests: all_gather's input is this rank's chunk of the
output, reduce_scatter's output is this rank's chunk of the input;
all_reduce and broadcast exist only in place in torch, all_to_all only out
of place. send_recv is nccl-tests' sendrecv: a ring where each rank sends its
buffer to rank + 1 and receives rank - 1's into a second buffer (out of place).
"""

import attrs

PLACEMENTS = {
    "all_reduce": ("in_place",),
    "broadcast": ("in_place",),
    "all_gather": ("out_of_place", "in_place"),
    "reduce_scatter": ("out_of_place", "in_place"),
    "all_to_all": ("out_of_place",),
    "send_recv": ("out_of_place",),
}
PERIOD = 7  # pattern values: rank + 1 + (index mod PERIOD)


@attrs.frozen
class Members:
    """The ranks a collective runs over: this rank's place among them, how many they are,
    and their process group (None: every rank). Groups are consecutive ranks."""

    rank: int
    world_size: int
    device: object
    group: object = None
    first: int = 0  # the global rank of the group's first member

    def global_rank(self, member: int) -> int:
        return self.first + member


def members(context, group_size: int) -> Members:
    """This rank's group of ``group_size`` consecutive ranks: every rank, or one of the
    world / group_size subgroups that all run each collective at once."""
    if group_size == context.world_size:
        return Members(context.rank, context.world_size, context.device)
    import torch.distributed as dist

    group, _ = dist.new_subgroups(group_size)
    first = context.rank - context.rank % group_size
    return Members(dist.get_rank(group), group_size, context.device, group, first)


@attrs.define
class Call:
    """One collective ready to issue: ``run()``, its output and what it must hold after."""

    run: object
    output: object
    expected: object


def pattern(rank: int, count: int, dtype, device):
    import torch

    values = torch.arange(count, device=device) % PERIOD + (rank + 1)
    return values.to(dtype)


def _sum_over_ranks(world: int, count: int, dtype, device):
    return sum(pattern(r, count, dtype, device).double() for r in range(world)).to(dtype)


def _all_reduce(ctx, count, dtype, placement, splits):
    import torch.distributed as dist

    buf = pattern(ctx.rank, count, dtype, ctx.device)
    expected = _sum_over_ranks(ctx.world_size, count, dtype, ctx.device)
    return Call(lambda: dist.all_reduce(buf, group=ctx.group), buf, expected)


def _broadcast(ctx, count, dtype, placement, splits):
    import torch.distributed as dist

    buf = pattern(ctx.rank, count, dtype, ctx.device)
    expected = pattern(0, count, dtype, ctx.device)
    return Call(lambda: dist.broadcast(buf, src=ctx.first, group=ctx.group), buf, expected)


def _all_gather(ctx, count, dtype, placement, splits):
    import torch
    import torch.distributed as dist

    chunk = count // ctx.world_size
    mine = pattern(ctx.rank, chunk, dtype, ctx.device)
    out = torch.empty(count, dtype=dtype, device=ctx.device)
    if placement == "in_place":
        out[ctx.rank * chunk : (ctx.rank + 1) * chunk] = mine
        mine = out[ctx.rank * chunk : (ctx.rank + 1) * chunk]
    expected = torch.cat([pattern(r, chunk, dtype, ctx.device) for r in range(ctx.world_size)])
    return Call(lambda: dist.all_gather_into_tensor(out, mine, group=ctx.group), out, expected)


def _reduce_scatter(ctx, count, dtype, placement, splits):
    import torch
    import torch.distributed as dist

    chunk = count // ctx.world_size
    mine = slice(ctx.rank * chunk, (ctx.rank + 1) * chunk)
    source = pattern(ctx.rank, count, dtype, ctx.device)
    expected = _sum_over_ranks(ctx.world_size, count, dtype, ctx.device)[mine]
    if placement == "in_place":
        out = source[mine]
    else:
        out = torch.empty(chunk, dtype=dtype, device=ctx.device)
    return Call(lambda: dist.reduce_scatter_tensor(out, source, group=ctx.group), out, expected)


def _all_to_all(ctx, count, dtype, placement, splits):
    """``splits[src][dst]``: elements rank src sends to rank dst (rows sum to count)."""
    import torch
    import torch.distributed as dist

    rank, world = ctx.rank, ctx.world_size
    send = [splits[rank][dst] for dst in range(world)]
    receive = [splits[src][rank] for src in range(world)]
    source = pattern(rank, count, dtype, ctx.device)
    out = torch.empty(sum(receive), dtype=dtype, device=ctx.device)
    pieces = []
    for src in range(world):
        offset = sum(splits[src][:rank])
        pieces.append(pattern(src, count, dtype, ctx.device)[offset : offset + splits[src][rank]])
    expected = torch.cat(pieces)
    group = ctx.group
    return Call(
        lambda: dist.all_to_all_single(out, source, receive, send, group=group), out, expected
    )


def _send_recv(ctx, count, dtype, placement, splits):
    """Send to rank + 1 while receiving from rank - 1; both complete before it returns.

    One rank sends to itself, as nccl-tests does: a copy on the device.
    """
    import torch
    import torch.distributed as dist

    rank, world = ctx.rank, ctx.world_size
    source = pattern(rank, count, dtype, ctx.device)
    out = torch.empty(count, dtype=dtype, device=ctx.device)
    expected = pattern((rank - 1) % world, count, dtype, ctx.device)
    if world == 1:
        return Call(lambda: out.copy_(source), out, expected)

    def run():
        sent = dist.isend(source, ctx.global_rank((rank + 1) % world), group=ctx.group)
        dist.recv(out, ctx.global_rank((rank - 1) % world), group=ctx.group)
        sent.wait()

    return Call(run, out, expected)


BUILDERS = {
    "all_reduce": _all_reduce,
    "broadcast": _broadcast,
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all,
    "send_recv": _send_recv,
}


def prepare(ctx, operation: str, count: int, dtype, placement: str, splits=None) -> Call:
    """The call of ``operation`` over ``count`` counted elements on this rank."""
    return BUILDERS[operation](ctx, count, dtype, placement, splits)


def wrong_elements(call: Call) -> int:
    """Elements of the output that differ from the expected result."""
    return int((call.output != call.expected).sum().item())


def equal_splits(count: int, world: int) -> list[list[int]]:
    return [[count // world] * world for _ in range(world)]
