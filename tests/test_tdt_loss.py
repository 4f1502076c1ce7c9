"""The vectorised CPU TDT loss against the literal recursion: loss and gradients, on random inputs."""

from __future__ import annotations

import pytest
import torch

from batch_assets.training.tdt_loss import naive_tdt_loss, tdt_loss


@pytest.mark.parametrize("seed,durations", [(0, [0, 1, 2, 3, 4]), (1, [0, 1, 2]), (2, [1, 2, 4])])
def test_matches_naive_recursion_with_gradients(seed, durations):
    torch.manual_seed(seed)
    B, T, U, V = 3, 7, 4, 5  # V labels + blank (index V)
    joint = torch.randn(B, T, U + 1, V + 1 + len(durations), dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, V, (B, U))
    frame_lengths = torch.tensor([7, 5, 6])
    target_lengths = torch.tensor([4, 2, 3])
    fast = tdt_loss(joint, targets, frame_lengths, target_lengths, durations, blank=V, reduction="none")
    slow = naive_tdt_loss(joint, targets, frame_lengths, target_lengths, durations, blank=V)
    torch.testing.assert_close(fast, slow.to(fast.dtype), rtol=1e-5, atol=1e-5)
    (g_fast,) = torch.autograd.grad(fast.sum(), joint)
    (g_slow,) = torch.autograd.grad(slow.sum(), joint)
    torch.testing.assert_close(g_fast, g_slow.to(g_fast.dtype), rtol=1e-4, atol=1e-5)


def test_a_certain_alignment_has_zero_loss():
    # Two labels, each emitted with duration 1 then a final blank with duration 1: make that path certain.
    durations, V, T, U = [0, 1], 2, 3, 2
    joint = torch.full((1, T, U + 1, V + 1 + 2), -50.0)
    joint[0, 0, 0, 0] = joint[0, 1, 1, 1] = joint[0, 2, 2, V] = 50.0  # y1 at t0, y2 at t1, blank at t2
    joint[..., V + 1 + 1] = 50.0  # duration 1 everywhere
    loss = tdt_loss(joint, torch.tensor([[0, 1]]), torch.tensor([3]), torch.tensor([2]), durations, blank=V,
                    reduction="none")
    assert loss.item() == pytest.approx(0.0, abs=1e-3)
