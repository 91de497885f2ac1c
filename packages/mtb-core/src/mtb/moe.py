"""Mixture-of-experts feed-forward: a softmax top-k router with capacity, and its layer.

Routing is decided per group of tokens (a sequence in the model), as in
GShard: capacity, drops and the load-balancing loss of a sequence depend on
that sequence alone, so splitting a batch over data-parallel ranks routes
every token exactly as one process with the whole batch does.

Capacity counts routed assignments (tokens x k), as Megatron-LM does:
capacity = ceil(capacity_factor x tokens x k / experts). Slots are filled
first choices first, then by token order, so a token loses its second choice
before anyone loses a first. Ties between router probabilities go to the
lower expert id (a stable sort). Gate weights: the top-1 probability
(Switch), the top-k probabilities renormalised (GShard).
"""

import contextlib
import math
import threading

import attrs
import torch
import torch.nn.functional as F
from torch import nn


@attrs.define
class Routing:
    """Where each token goes: ``experts``, ``gates``, ``kept`` are [..., T, k]."""

    experts: torch.Tensor
    gates: torch.Tensor
    kept: torch.Tensor
    capacity: int
    probs: torch.Tensor  # [..., T, E] router probabilities

    @property
    def num_experts(self) -> int:
        return self.probs.shape[-1]

    def assigned_per_expert(self) -> list[int]:
        """Assignments each expert was chosen for, before capacity."""
        return self._count(self.experts.flatten())

    def kept_per_expert(self) -> list[int]:
        return self._count(self.experts[self.kept])

    def _count(self, experts: torch.Tensor) -> list[int]:
        return torch.bincount(experts, minlength=self.num_experts).tolist()

    @property
    def dropped(self) -> int:
        return int((~self.kept).sum().item())


def capacity(tokens: int, experts: int, factor: float | None, top_k: int = 1) -> int:
    """Slots per expert in a group of ``tokens``; ``factor`` None is dropless (every slot)."""
    if factor is None:
        return tokens * top_k
    return math.ceil(factor * tokens * top_k / experts)


def route(logits: torch.Tensor, top_k: int, capacity_factor: float | None) -> Routing:
    """Gate ``logits`` [..., T, E] to ``top_k`` experts; capacity per group of T tokens."""
    tokens, experts = logits.shape[-2:]
    probs = torch.softmax(logits.float(), dim=-1)
    # a stable descending sort: equal probabilities keep the lower expert id first
    order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices
    chosen = order[..., :top_k]
    top_probs = probs.gather(-1, chosen)
    gates = top_probs if top_k == 1 else top_probs / top_probs.sum(-1, keepdim=True)
    limit = capacity(tokens, experts, capacity_factor, top_k)
    # choice-major order within each group: every first choice before any second
    choice_major = chosen.transpose(-1, -2).reshape(*chosen.shape[:-2], top_k * tokens)
    one_hot = F.one_hot(choice_major, experts)
    slot = (one_hot.cumsum(-2) * one_hot).sum(-1) - 1
    kept = (slot < limit).reshape(*chosen.shape[:-2], top_k, tokens).transpose(-1, -2)
    return Routing(chosen, gates, kept, limit, probs)


def load_balancing_loss(routing: Routing) -> torch.Tensor:
    """Switch Transformer's auxiliary loss E x sum_e f_e x P_e, averaged over groups.

    f_e: fraction of a group's assignments routed to expert e (before
    capacity); P_e: the group's mean router probability of e. 1.0 when
    uniform; the gradient flows through P_e.
    """
    experts = routing.num_experts
    one_hot = F.one_hot(routing.experts, experts).sum(-2).float()  # [..., T, E]
    fraction = one_hot.mean(-2) / routing.experts.shape[-1]
    mean_prob = routing.probs.mean(-2)
    return (experts * (fraction * mean_prob).sum(-1)).mean()


def z_loss(logits: torch.Tensor) -> torch.Tensor:
    """ST-MoE's router z-loss: the mean squared log-partition of the router logits."""
    return torch.logsumexp(logits.float(), dim=-1).square().mean()


def imbalance(per_expert: list[int]) -> float:
    """max / mean of the loads (1.0 is perfect balance)."""
    mean = sum(per_expert) / len(per_expert)
    return max(per_expert) / mean if mean else 0.0


@attrs.define
class Plan:
    """Kept assignments sorted by expert: token row, gate and rows per expert."""

    token: torch.Tensor
    gate: torch.Tensor
    counts: torch.Tensor  # [E]


def plan(routing: Routing) -> Plan:
    """The kept (token, expert) assignments in expert order (stable: token order within)."""
    top_k = routing.experts.shape[-1]
    kept = routing.kept.flatten()
    token = torch.arange(kept.numel() // top_k, device=kept.device).repeat_interleave(top_k)
    expert = routing.experts.flatten()[kept]
    order = torch.argsort(expert, stable=True)
    counts = torch.bincount(expert, minlength=routing.num_experts)
    return Plan(token[kept][order], routing.gates.flatten()[kept][order], counts)


def run_experts(rows: torch.Tensor, counts: list[int], w1, w2) -> torch.Tensor:
    """Rows in chunks of ``counts`` through gelu(x W1_e) W2_e, chunk i by expert i mod E.

    The modulo lets an expert-parallel rank pass rows grouped by source rank,
    then by its local expert, without reordering them.
    """
    chunks = rows.split(counts)
    experts = w1.shape[0]
    outs = [F.gelu(chunk @ w1[i % experts]) @ w2[i % experts] for i, chunk in enumerate(chunks)]
    return torch.cat(outs)


def local_experts(rows: torch.Tensor, counts: torch.Tensor, w1, w2) -> torch.Tensor:
    """Every expert in this process: the dispatch of one-process training."""
    return run_experts(rows, counts.tolist(), w1, w2)


@attrs.define
class Traffic:
    """All_to_all bytes this rank sent and the seconds it spent in them, since last taken."""

    bytes: int = 0
    seconds: float = 0.0

    def take(self) -> tuple[int, float]:
        taken = (self.bytes, self.seconds)
        self.bytes, self.seconds = 0, 0.0
        return taken


class MoE(nn.Module):
    """Router plus E GELU experts in place of a block's MLP.

    ``dispatch(rows, counts, w1, w2)`` runs the routed rows through the
    experts; expert parallelism replaces it with an all_to_all dispatch and
    combine and adds its all_to_alls to ``traffic``. After each forward
    ``aux_loss`` holds the weighted router losses; ``totals`` accumulates the
    detached routing counts of this rank until the trainer takes them.
    """

    def __init__(self, cfg):
        super().__init__()
        d, hidden, experts = cfg.d_model, cfg.mlp_ratio * cfg.d_model, cfg.moe_experts
        self.top_k = cfg.moe_top_k
        self.capacity_factor = None if cfg.moe_dropless else cfg.moe_capacity_factor
        self.aux_coef, self.z_coef = cfg.moe_aux_loss_coef, cfg.moe_z_loss_coef
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.empty(experts, d, hidden))
        self.w2 = nn.Parameter(torch.empty(experts, hidden, d))
        self.dispatch = local_experts
        self.traffic = Traffic()
        self.aux_loss: torch.Tensor | None = None
        self.stats: dict | None = None
        self.totals: list[dict] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        logits = self.router(x)
        routing = route(logits, self.top_k, self.capacity_factor)
        assigned = plan(routing)
        rows = x.reshape(-1, width)[assigned.token]
        done = self.dispatch(rows, assigned.counts, self.w1, self.w2)
        # under autocast the experts' output is in the low precision, the residual is not
        weighted = (done * assigned.gate.to(done.dtype)[:, None]).to(x.dtype)
        out = torch.zeros_like(x.reshape(-1, width)).index_add(0, assigned.token, weighted)
        self.aux_loss = self.aux_coef * load_balancing_loss(routing)
        if self.z_coef:
            self.aux_loss = self.aux_loss + self.z_coef * z_loss(logits)
        self.stats = {
            "kept": assigned.counts.detach(),
            "assigned": routing.kept.numel(),
            "aux_loss": self.aux_loss.detach(),
        }
        if not getattr(_recompute, "active", False):
            self.totals.append(self.stats)
        return out.view(batch, seq, width)


#: whether this thread is recomputing a checkpointed block (its routing counted already)
_recompute = threading.local()


@contextlib.contextmanager
def recomputing():
    """While activation checkpointing recomputes a block: its routing is not counted again.

    The all_to_alls of a recomputed expert-parallel layer do run again, so their bytes
    and time are counted.
    """
    before = getattr(_recompute, "active", False)
    _recompute.active = True
    try:
        yield
    finally:
        _recompute.active = before


def checkpoint_contexts():
    """``context_fn`` of torch's checkpoint: nothing in forward, ``recomputing`` in backward."""
    return contextlib.nullcontext(), recomputing()


def take_step(layers: list[MoE]) -> dict | None:
    """This rank's routing and all_to_all figures of every forward since the last call.

    Per layer, tokens kept per expert summed over the step's micro-batches;
    assignments (tokens x k) before capacity; the mean auxiliary loss; the
    all_to_all bytes sent and milliseconds spent (forward and backward).
    """
    if not layers:
        return None
    kept, assigned, sent, seconds = [], 0, 0, 0.0
    aux: list[float] = []
    for layer in layers:
        forwards, layer.totals = layer.totals, []
        counts = [f["kept"] for f in forwards]
        kept.append(torch.stack(counts).sum(0).tolist() if counts else [0] * layer.w1.shape[0])
        assigned += sum(f["assigned"] for f in forwards)
        aux.extend(float(f["aux_loss"]) for f in forwards)
        layer_bytes, layer_seconds = layer.traffic.take()
        sent, seconds = sent + layer_bytes, seconds + layer_seconds
    return {
        "tokens_per_expert": kept,
        "assigned": assigned,
        "aux_loss": sum(aux) / len(aux) if aux else 0.0,
        "all_to_all_bytes": sent,
        "all_to_all_ms": seconds * 1000.0,
    }
