"""Masked decay ``grad += alpha * weight * ~mask`` in place (Hu et al.), capturable form
(``masked_decay_nocheck_``: no value scans), 8192x8192 and a GPT-2 FFN weight 3072x768, bf16 and
fp32. Checked against the reference; grad is restored (untimed) before every call. Bytes: read
grad, weight and mask, write grad."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels.ops.masked_decay import masked_decay_bytes, masked_decay_nocheck_, masked_decay_reference
from repro.checks import rel_err
from repro.kbench.core import Case, KernelBench, require

ALPHA = 6e-5
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
TOL = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}  # as tests/test_masked_decay.py
FULL_SHAPES = [(8192, 8192), (3072, 768)]
SMOKE_SHAPES = [(16, 32)]


@dataclass
class Inputs:
    grad0: torch.Tensor
    weight: torch.Tensor
    mask: torch.Tensor
    grad: torch.Tensor  # updated in place; restored from grad0 before every call


def _inputs(case: Case, device: torch.device, gen: torch.Generator) -> Inputs:
    r, c = case.args
    dtype = DTYPES[case.dtype]
    grad0 = torch.randn(r, c, device=device, generator=gen).to(dtype)
    weight = torch.randn(r, c, device=device, generator=gen).to(dtype)
    mask = torch.rand(r, c, device=device, generator=gen) < 0.5
    return Inputs(grad0, weight, mask, grad0.clone())


def _check(inp: Inputs, variant: str, out: torch.Tensor) -> dict[str, float]:
    ref = masked_decay_reference(inp.grad0, inp.weight, inp.mask, ALPHA)
    err = rel_err(out, ref)
    require(err <= TOL[ref.dtype], f"{variant} relative error {err:.2e}")
    return {"rel_err": err}


MASKED_DECAY = KernelBench(
    "masked_decay",
    __doc__,
    cases={
        "full": [Case(f"{r}x{c}", d, (r, c)) for r, c in FULL_SHAPES for d in DTYPES],
        "smoke": [Case(f"{r}x{c}", d, (r, c)) for r, c in SMOKE_SHAPES for d in DTYPES],
    },
    inputs=_inputs,
    check=_check,
    nbytes=lambda inp: masked_decay_bytes(inp.grad, inp.weight, inp.mask),
    setup=lambda inp: lambda: inp.grad.copy_(inp.grad0),
)


@MASKED_DECAY.variant(baseline=True, gate=False, doc="plain PyTorch reference (out of place)")
def reference(inp: Inputs) -> Callable[[], object]:
    return lambda: masked_decay_reference(inp.grad, inp.weight, inp.mask, ALPHA)


@MASKED_DECAY.variant(doc="Triton kernel, in place (capturable)")
def triton(inp: Inputs) -> Callable[[], object]:
    return lambda: masked_decay_nocheck_(inp.grad, inp.weight, inp.mask, ALPHA)
