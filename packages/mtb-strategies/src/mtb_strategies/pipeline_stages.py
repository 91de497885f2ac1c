"""mtb's GPT cut into pipeline stages, with the full model's parameter names kept.

Every rank builds the whole GPT from the seed (so each stage starts from the
single-process initialisation), then keeps only its stages' modules: the
first stage holds the embeddings, the last the final norm and the head, and
the blocks are spread evenly. Names stay those of the GPT (``blocks.3.mlp.fc.weight``),
so states from all stages merge into the full model's, and checkpoints carry
the names every layout shares.
"""

import torch
import torch.nn.functional as F
from torch import nn

from mtb.api import stage_layers


def pipeline_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The GPT's loss, computed by the schedule on the last stage's output."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


class StageModule(nn.Module):
    """One stage: (embeddings), some blocks, (final norm and head) of a GPT."""

    def __init__(self, model: nn.Module, layers: range, first: bool, last: bool):
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.tok_emb, self.pos_emb, self.drop = model.tok_emb, model.pos_emb, model.drop
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in layers})
        if last:
            self.ln_f, self.head = model.ln_f, model.head
        #: set by the engine for each step: the trainer's hook on each micro-batch's output
        self.on_output = None
        #: the micro-batch being computed (set by the timed stage around each forward)
        self.micro: int | None = None
        #: the positions of the tokens this rank holds; None: 0..seq-1 (set under cp)
        self.positions: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            positions = self.positions
            if positions is None:
                positions = torch.arange(x.shape[1], device=x.device)
            x = self.drop(self.tok_emb(x) + self.pos_emb(positions))
        for block in self.blocks.values():
            x = block(x)
        if self.last:
            x = self.head(self.ln_f(x))
        if self.on_output is not None and self.micro is not None:
            x = self.on_output(x, self.micro)
        return x


def split(model: nn.Module, indices: list[int], stages: int) -> list[StageModule]:
    """The stage modules ``indices`` of ``model``, whose other parts are dropped.

    ``model`` keeps the GPT's names for what this rank holds (blocks in a
    ModuleDict keyed by their index), so its state dict is this rank's share
    of the full model's.
    """
    layers = stage_layers(len(model.blocks), stages)
    parts = [StageModule(model, layers[i], i == 0, i == stages - 1) for i in indices]
    kept = sorted(b for i in indices for b in layers[i])
    model.blocks = nn.ModuleDict({str(b): model.blocks[b] for b in kept})
    if 0 not in indices:
        del model.tok_emb, model.pos_emb, model.drop
    if stages - 1 not in indices:
        del model.ln_f, model.head
    return parts
