"""2:4 magnitude mask (``nm_mask``, NaN/Inf scan off so the call is capturable) on an 8192x2048
weight, bf16 and fp32; checked exactly 2 kept per group of 4, magnitude-optimal per group and
equal to the stable-sort reference. Bytes: read W, write a byte mask."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels.ops.nm_mask import nm_mask, nm_mask_reference
from repro.kbench.core import Case, KernelBench, require

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass
class Inputs:
    w: torch.Tensor


def _inputs(case: Case, device: torch.device, gen: torch.Generator) -> Inputs:
    r, c = case.args
    return Inputs(torch.randn(r, c, device=device, generator=gen).to(DTYPES[case.dtype]))


def _check(inp: Inputs, variant: str, mask: torch.Tensor) -> dict[str, float]:
    w = inp.w
    require(mask.dtype == torch.bool and mask.shape == w.shape, f"{variant}: mask {mask.dtype} {tuple(mask.shape)}")
    g, mg = w.abs().float().reshape(-1, 4), mask.reshape(-1, 4)
    require(bool((mg.sum(-1) == 2).all()), "not exactly 2 kept per group of 4")
    kept_min = torch.where(mg, g, torch.inf).amin(-1)
    dropped_max = torch.where(mg, -torch.inf, g).amax(-1)
    require(bool((kept_min >= dropped_max).all()), "a dropped entry is larger than a kept one")
    require(torch.equal(mask, nm_mask_reference(w, 2, 4)), "differs from the stable-sort reference")
    return {}


NM_MASK = KernelBench(
    "nm_mask",
    __doc__,
    cases={
        "full": [Case("8192x2048", d, (8192, 2048)) for d in DTYPES],
        "smoke": [Case("16x32", d, (16, 32)) for d in DTYPES],
    },
    inputs=_inputs,
    check=_check,
    nbytes=lambda inp: inp.w.numel() * (inp.w.element_size() + 1),
)


@NM_MASK.variant(baseline=True, gate=False, doc="stable sort per group, plain PyTorch")
def reference(inp: Inputs) -> Callable[[], object]:
    return lambda: nm_mask_reference(inp.w, 2, 4)


@NM_MASK.variant(doc="one Triton pass (kernels._flex_triton group kernel, fixed n)")
def triton(inp: Inputs) -> Callable[[], object]:
    return lambda: nm_mask(inp.w, 2, 4, check_finite=False)
