"""A vectorised Token-and-Duration Transducer (TDT) loss in plain PyTorch, for training on CPU.

NeMo's TDT losses do not run on CPU (`tdt` needs CUDA; `tdt_pytorch` hard-codes `.cuda()` and is a
Python double loop). This computes the same forward variable in log space:

    alpha(0, 0) = 0
    alpha(t, u) = logsumexp(
        alpha(t-d, u)   + blank(t-d, u)    + dur(t-d, u, d)      for d in durations, d > 0
        alpha(t-d, u-1) + label(t-d, u-1)  + dur(t-d, u-1, d)    for d in durations (d = 0 allowed)
    )
    log P(y|x) = logsumexp_d( alpha(T-d, U) + blank(T-d, U) + dur(T-d, U, d) ),  d > 0

with label and duration log-probabilities normalised separately (as NeMo does). The loop runs over
time only; inside one time step, the duration-0 label transitions (alpha(t, u-1) -> alpha(t, u)) form a
log-space linear recurrence over u, solved at once with a cumulative sum and `logcumsumexp`.
Autograd gives the gradients. `naive_tdt_loss` is the literal recursion, for tests.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NEG = -1e30


def _split(joint: torch.Tensor, num_durations: int, sigma: float) -> tuple[torch.Tensor, torch.Tensor]:
    label = F.log_softmax(joint[..., :-num_durations], dim=-1) - sigma
    duration = F.log_softmax(joint[..., -num_durations:], dim=-1)
    return label, duration


def tdt_loss(
    joint: torch.Tensor,
    targets: torch.Tensor,
    frame_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    durations: list[int],
    blank: int,
    sigma: float = 0.0,
    reduction: str = "mean_volume",
) -> torch.Tensor:
    """joint: (B, T, U+1, V+1+D) raw logits; targets: (B, U) int; returns the mean negative log-likelihood.

    `reduction="mean_volume"` divides each utterance's NLL by its target length (like NeMo's default);
    "none" returns per-utterance NLLs; "mean" their plain mean.
    """
    B, T, U1, _ = joint.shape
    D = len(durations)
    label_lp, dur_lp = _split(joint.float(), D, sigma)
    blank_lp = label_lp[..., blank]  # (B, T, U+1)
    gather_idx = targets.clamp(min=0).long()[:, None, :, None].expand(B, T, U1 - 1, 1)
    emit_lp = label_lp[:, :, :-1, :].gather(-1, gather_idx).squeeze(-1)  # (B, T, U): label y_{u+1} at (t, u)
    emit_lp = torch.cat([emit_lp, emit_lp.new_full((B, T, 1), NEG)], dim=2)  # pad u = U

    d_idx = {d: i for i, d in enumerate(durations)}
    zero = d_idx.get(0)
    positive = [(d, i) for d, i in d_idx.items() if d > 0]
    # label transitions u-1 -> u, aligned on u (column 0 impossible): emit and duration log-probs shifted by one
    emit_shift = torch.cat([emit_lp.new_full((B, T, 1), NEG), emit_lp[:, :, :-1]], dim=2)  # (B, T, U+1)
    dur_shift = torch.cat([dur_lp.new_full((B, T, 1, D), NEG), dur_lp[:, :, :-1, :]], dim=2)  # (B, T, U+1, D)
    stay = (blank_lp[..., None] + dur_lp).transpose(2, 3)  # blank with each duration, (B, T, D, U+1)
    move = (emit_shift[..., None] + dur_shift).transpose(2, 3)  # label with each duration, landing on u
    alphas: list[torch.Tensor] = []
    for t in range(T):
        if t == 0:
            base = torch.full((B, U1), NEG, device=joint.device, dtype=label_lp.dtype)
            base[:, 0] = 0.0
        else:
            valid = [(d, i) for d, i in positive if t - d >= 0]
            times = torch.tensor([t - d for d, _ in valid], device=joint.device)
            cols = torch.tensor([i for _, i in valid], device=joint.device)
            prev = torch.stack([alphas[t - d] for d, _ in valid], dim=1)  # (B, n, U+1)
            prev_shift = torch.cat([prev.new_full((B, len(valid), 1), NEG), prev[:, :, :-1]], dim=2)
            stay_t = stay[:, times, cols]  # (B, n, U+1)
            move_t = move[:, times, cols]
            base = torch.logsumexp(torch.cat([prev + stay_t, prev_shift + move_t], dim=1), dim=1)
        if zero is not None and U1 > 1:
            # alpha(t, u) = logaddexp(base(t, u), alpha(t, u-1) + w(t, u-1)), w = emit + dur(0)
            w = emit_lp[:, t, :-1] + dur_lp[:, t, :-1, zero]  # (B, U)
            prefix = torch.cat([w.new_zeros((B, 1)), torch.cumsum(w, dim=1)], dim=1)  # S(u) = sum_{j<u} w(j)
            alpha = prefix + torch.logcumsumexp(base - prefix, dim=1)
        else:
            alpha = base
        alphas.append(alpha)
    alpha_all = torch.stack(alphas, dim=1)  # (B, T, U+1)

    finals = []
    batch = torch.arange(B, device=joint.device)
    for d, i in d_idx.items():
        if d == 0:
            continue
        t_from = frame_lengths.long() - d
        valid = t_from >= 0
        t_safe = t_from.clamp(min=0)
        u = target_lengths.long()
        value = alpha_all[batch, t_safe, u] + blank_lp[batch, t_safe, u] + dur_lp[batch, t_safe, u, i]
        finals.append(torch.where(valid, value, torch.full_like(value, NEG)))
    nll = -torch.logsumexp(torch.stack(finals), dim=0)
    if reduction == "none":
        return nll
    if reduction == "mean":
        return nll.mean()
    return (nll / target_lengths.clamp(min=1).to(nll.dtype)).mean()


def naive_tdt_loss(joint, targets, frame_lengths, target_lengths, durations, blank, sigma=0.0) -> torch.Tensor:
    """The recursion written out literally, one (t, u) at a time (slow; for tests). Returns per-utterance NLL."""
    D = len(durations)
    label_lp, dur_lp = _split(joint.float(), D, sigma)
    out = []
    for b in range(joint.shape[0]):
        T, U = int(frame_lengths[b]), int(target_lengths[b])
        alpha = [[None] * (U + 1) for _ in range(T)]
        for t in range(T):
            for u in range(U + 1):
                if t == 0 and u == 0:
                    alpha[t][u] = joint.new_tensor(0.0)
                    continue
                terms = []
                for i, d in enumerate(durations):
                    if d > 0 and t - d >= 0 and alpha[t - d][u] is not None:
                        terms.append(alpha[t - d][u] + label_lp[b, t - d, u, blank] + dur_lp[b, t - d, u, i])
                    if u > 0 and t - d >= 0 and alpha[t - d][u - 1] is not None:
                        y = targets[b, u - 1]
                        terms.append(alpha[t - d][u - 1] + label_lp[b, t - d, u - 1, y] + dur_lp[b, t - d, u - 1, i])
                alpha[t][u] = torch.logsumexp(torch.stack(terms), 0) if terms else None
        finals = [
            alpha[T - d][U] + label_lp[b, T - d, U, blank] + dur_lp[b, T - d, U, i]
            for i, d in enumerate(durations)
            if d > 0 and T - d >= 0 and alpha[T - d][U] is not None
        ]
        out.append(-torch.logsumexp(torch.stack(finals), 0))
    return torch.stack(out)
