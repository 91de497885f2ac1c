"""SavedActivations counts what autograd keeps for backward, once per storage, at its peak."""

import pytest
import torch
from torch import nn

from mtb.activations import SavedActivations

pytestmark = pytest.mark.timeout(30)


def test_a_saved_result_is_counted_and_freed_by_backward():
    x = torch.randn(1000, requires_grad=True)
    with SavedActivations() as saved:
        y = torch.exp(x)  # exp saves its result: 1000 floats
        assert saved.live_bytes == 4000
        y.sum().backward()
    assert saved.peak_bytes == 4000 and saved.live_bytes == 0


def test_parameters_and_their_views_are_not_activations():
    layer = nn.Linear(64, 64, bias=False)
    x = torch.randn(8, 64)
    with SavedActivations() as saved:
        layer(x).sum().backward()
    # the linear saves its input (8 x 64 floats) and its weight, which is a parameter
    assert saved.peak_bytes == 8 * 64 * 4


def test_views_of_one_storage_count_once():
    x = torch.randn(256, requires_grad=True)
    with SavedActivations() as saved:
        base = x * 2
        (base[:128] * base[128:]).sum().backward()  # both halves saved: one storage
    assert saved.peak_bytes == 256 * 4


def test_the_peak_is_what_is_alive_at_once():
    x = torch.randn(500, requires_grad=True)
    with SavedActivations() as saved:
        for _ in range(3):  # each micro-batch freed by its backward before the next
            torch.exp(x).sum().backward()
        kept = [torch.exp(x) for _ in range(3)]  # three graphs alive together
        assert saved.live_bytes == 3 * 2000
        torch.stack(kept).sum().backward()
    assert saved.peak_bytes == 3 * 2000  # stack and sum save no tensors of their own


def test_outside_the_meter_nothing_is_counted():
    x = torch.randn(100, requires_grad=True)
    saved = SavedActivations()
    torch.exp(x).sum().backward()
    assert saved.peak_bytes == 0
