"""Checkpoints: layout on disk, metadata, resume selection, backends and the lifecycle.

``layout`` and ``metadata`` are plain Python (no torch), so listing,
inspecting and cleaning a checkpoint directory stays fast; the lifecycle
and the DCP backend import torch.
"""
