"""figure3's training-step mask function: FAST's masker runs without its per-call host sync, and a
non-finite weight is still reported (once, after the steps), never masked silently."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.flex import TBS
from suites.figure3 import trainer_mask_fn


def _weights() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(16, 32, generator=gen), torch.randn(32, 16, generator=gen)]


def test_fast_masks_then_check_passes_on_finite_weights():
    ws = _weights()
    fn = trainer_mask_fn(TBS(4), "fast", torch.device("cpu"))
    for _ in range(2):
        masks = fn(ws)
        assert [m.shape for m in masks] == [w.shape for w in ws]
        assert all(m.dtype == torch.bool for m in masks)
    fn.check_finite()


def test_fast_non_finite_weight_is_reported():
    ws = _weights()
    fn = trainer_mask_fn(TBS(4), "fast", torch.device("cpu"))
    fn(ws)
    ws[1][3, 5] = float("nan")
    with pytest.raises(ValueError, match="NaN|non-finite"):
        fn(ws)  # a path that reads the host raises here; the device path counts it
        fn.check_finite()
