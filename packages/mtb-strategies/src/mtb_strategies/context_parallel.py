"""Context parallelism: each sequence split over the cp ranks, attention as a ring.

Load balance (as Megatron-LM and torchtitan split a causal sequence): the
sequence is cut into 2 x cp equal chunks and cp rank i holds chunks i and
2cp-1-i, so every rank has as many query-key pairs under the causal mask.
Each rank embeds its tokens at their true positions and runs everything but
attention on them alone.

Attention (ring attention, Liu et al. 2023): each rank starts from its own
K/V and passes them to the next rank cp-1 times, so every query meets every
key block once. Each block's partial result is merged into the running one
with the log-sum-exp rescaling of online softmax; the causal mask of a block
pair comes from the two chunks' true positions. Backward goes around the
ring again with K/V and their gradient accumulators, and one last hop brings
each rank its own dK/dV. torch's ``context_parallel`` only dispatches the
CUDA attention kernels; this ring runs on any backend, gloo included.
"""

import time

import attrs
import torch
import torch.distributed as dist


def chunk_positions(seq_len: int, cp: int, rank: int) -> torch.Tensor:
    """Positions of the tokens cp rank ``rank`` holds: chunks rank and 2cp-1-rank."""
    size = seq_len // (2 * cp)
    first, second = rank * size, (2 * cp - 1 - rank) * size
    return torch.cat([torch.arange(first, first + size), torch.arange(second, second + size)])


@attrs.define
class RingTraffic:
    """What the ring sent from this rank: bytes, messages and seconds waiting, cumulative."""

    bytes: int = 0
    messages: int = 0
    seconds: float = 0.0

    def snapshot(self) -> tuple[int, int, float]:
        return self.bytes, self.messages, self.seconds


@attrs.define
class Ring:
    """The cp group as a ring: this rank's place, its neighbours, every rank's positions."""

    group: object
    rank: int
    size: int
    positions: list  # per cp rank, on the device
    traffic: RingTraffic = attrs.field(factory=RingTraffic)

    @classmethod
    def of(cls, group, seq_len: int, device) -> "Ring":
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        positions = [chunk_positions(seq_len, size, r).to(device) for r in range(size)]
        return cls(group, rank, size, positions)

    def shift(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        """Send ``tensors`` to the next rank, receive the previous rank's (same shapes)."""
        following = dist.get_global_rank(self.group, (self.rank + 1) % self.size)
        preceding = dist.get_global_rank(self.group, (self.rank - 1) % self.size)
        received = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t.contiguous(), following, self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, r, preceding, self.group) for r in received]
        started = time.perf_counter()
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        self.traffic.seconds += time.perf_counter() - started
        self.traffic.bytes += sum(t.numel() * t.element_size() for t in tensors)
        self.traffic.messages += len(tensors)
        return received

    def mask(self, owner: int) -> torch.Tensor:
        """Which (query, key) pairs the causal mask keeps between this rank's queries and
        the keys of ``owner``'s chunks."""
        return self.positions[owner][None, :] <= self.positions[self.rank][:, None]


@attrs.define
class RingSteps:
    """The ring's traffic per step (marked after each optimizer step), for the result."""

    ring: Ring | None
    marks: list = attrs.field(factory=list)

    def mark(self) -> None:
        if self.ring is not None:
            self.marks.append(self.ring.traffic.snapshot())

    def metrics(self, warmup_steps: int) -> dict:
        """Mean send/recv bytes, messages and ms per measured step (none without cp)."""
        if self.ring is None or len(self.marks) <= warmup_steps:
            return {}
        start = self.marks[warmup_steps - 1] if warmup_steps else (0, 0, 0.0)
        steps = len(self.marks) - warmup_steps
        sent, messages, seconds = (b - a for a, b in zip(start, self.marks[-1], strict=True))
        return {
            "context_parallel": {
                "attention": "ring",
                "cp": self.ring.size,
                "send_recv_bytes_per_step": sent / steps,
                "send_recv_messages_per_step": messages / steps,
                "send_recv_ms_per_step": seconds * 1e3 / steps,
            }
        }


def block_attention(q, k, v, mask, scale):
    """Softmax attention of q over one key block, masked: (output, log-sum-exp), float32.
    A query that sees no key of the block gets output 0 and log-sum-exp -inf."""
    scores = (q.float() @ k.float().transpose(-2, -1)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    weights = torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    return weights @ v.float(), lse


def merge(out, lse, block_out, block_lse):
    """Online softmax: two partial results over disjoint keys as one."""
    merged = torch.logaddexp(lse, block_lse)
    out = (
        out * torch.exp(lse - merged)[..., None]
        + block_out * torch.exp(block_lse - merged)[..., None]
    )
    return out, merged


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, ring: Ring):
        scale = q.shape[-1] ** -0.5
        out, lse = block_attention(q, k, v, ring.mask(ring.rank), scale)  # sees its own keys
        kv, owner = torch.stack([k, v]), ring.rank
        for _ in range(ring.size - 1):
            kv, owner = ring.shift(kv)[0], (owner - 1) % ring.size
            mask = ring.mask(owner)
            if mask.any():
                out, lse = merge(out, lse, *block_attention(q, kv[0], kv[1], mask, scale))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.scale = ring, scale
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        ring, scale = ctx.ring, ctx.scale
        grad_out = grad_out.float()
        delta = (grad_out * out).sum(-1, keepdim=True)
        grad_q = torch.zeros_like(q, dtype=torch.float32)
        kv = torch.stack([k, v])
        grad_kv = torch.zeros_like(kv, dtype=torch.float32)
        owner = ring.rank
        for hop in range(ring.size):
            mask = ring.mask(owner)
            if mask.any():
                keys, values = kv[0].float(), kv[1].float()
                scores = (q.float() @ keys.transpose(-2, -1)) * scale
                weights = torch.exp(scores.masked_fill(~mask, float("-inf")) - lse[..., None])
                grad_scores = weights * (grad_out @ values.transpose(-2, -1) - delta)
                grad_q += grad_scores @ keys * scale
                grad_kv[0] += grad_scores.transpose(-2, -1) @ q.float() * scale
                grad_kv[1] += weights.transpose(-2, -1) @ grad_out
            if hop < ring.size - 1:
                kv, grad_kv = ring.shift(kv, grad_kv)
                owner = (owner - 1) % ring.size
            else:  # the accumulators of the next rank's keys, home
                (grad_kv,) = ring.shift(grad_kv)
        return grad_q.to(q.dtype), grad_kv[0].to(k.dtype), grad_kv[1].to(v.dtype), None


def ring_attention(ring: Ring):
    """An ``attend`` kernel for mtb's attention: the ring over ``ring``'s cp group."""

    def attend(q, k, v, dropout: float) -> torch.Tensor:
        return RingAttention.apply(q, k, v, ring)

    return attend


def install(model, ring: Ring, stages=()) -> None:
    """Ring attention in every block of ``model`` (or of its pipeline ``stages``), and this
    rank's positions where the tokens are embedded."""
    for module in [model, *stages]:
        for block in module.modules():
            if hasattr(block, "attend"):
                block.attend = ring_attention(ring)
        if hasattr(module, "positions"):
            module.positions = ring.positions[ring.rank]


def local_batch(batch, ring: Ring):
    """The tokens of a micro-batch this rank holds: its two chunks of every sequence."""
    from mtb.api import Batch

    index = ring.positions[ring.rank]
    return Batch(batch.inputs[:, index], batch.targets[:, index])
