"""Flip rate (Hu et al. 2024, Def. 4.1): the fraction of 2:4 mask entries that changed between
consecutive optimizer steps, r_t = ||m(w_t) - m(w_{t-1})||_1 / D, per FFN linear and over all of them
(weighted by layer size). Sparse layers report their own (``SparseLinear.flip_rate_tensor``: the
transposable candidate mask for fst/weight24, the forward's mask for srste); dense layers (dense and
half runs) get the 2:4 magnitude mask of their weights computed here and never applied, so the
dense curve of Fig. 1 exists. Read lazily: ``measure`` returns a device tensor, no host sync.
"""

from __future__ import annotations

import torch
from torch import nn

from kernels.ops.nm_mask import nm24_mask

__all__ = ["FlipTracker", "nm24_mask"]


def _reports_itself(m: nn.Module) -> bool:
    return hasattr(m, "flip_rate_tensor") and getattr(m, "mode", "dense") != "dense"


class FlipTracker:
    """Flip rates of named linears; ``measure()`` after each optimizer step (and after the sparse
    layers' ``after_optimizer_step``) gives [overall, layer 1, layer 2, ...], NaN where not measured."""

    def __init__(self, layers: dict[str, nn.Module]) -> None:
        self.names = list(layers)
        self.layers = list(layers.values())
        self.numel = [int(m.weight.numel()) for m in self.layers]
        # reference masks of the layers tracked here (the dense ones): the mask after the last step
        self.refs: dict[str, torch.Tensor] = {
            n: nm24_mask(m.weight) for n, m in layers.items() if not _reports_itself(m) and m.weight.shape[1] % 4 == 0
        }

    @torch.no_grad()
    def measure(self) -> torch.Tensor | None:
        """This step's flip rates as one float32 device tensor [1 + layers]; None without layers."""
        if not self.layers:
            return None
        dev = self.layers[0].weight.device
        nan = torch.full((), float("nan"), device=dev)
        rates = []
        for name, m in zip(self.names, self.layers, strict=True):
            if name in self.refs:
                cur = nm24_mask(m.weight)
                r = torch.count_nonzero(cur != self.refs[name]).float() / m.weight.numel()
                self.refs[name] = cur
            else:
                r = m.flip_rate_tensor if _reports_itself(m) else None
            rates.append(nan if r is None else r.detach().float().reshape(()).to(dev))
        per = torch.stack(rates)
        n = torch.tensor(self.numel, dtype=torch.float32, device=dev)
        seen = ~per.isnan()
        overall = torch.where(seen, per * n, 0.0).sum() / torch.where(seen, n, 0.0).sum()  # NaN if none seen
        return torch.cat([overall.reshape(1), per])

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The reference masks (needed for an exact resume of the next step's flip rate)."""
        return {k: v.detach().cpu().clone() for k, v in self.refs.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if set(state) != set(self.refs):
            raise ValueError(f"flip tracker state has layers {sorted(state)}, expected {sorted(self.refs)}")
        for k, v in state.items():
            self.refs[k] = v.to(self.refs[k].device)
