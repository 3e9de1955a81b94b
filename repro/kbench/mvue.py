"""MVUE 2:4 (Hu et al.): the Triton kernel, capturable form (``mvue24_nocheck``: seed read on the
device, no value scans), at 8192x8192 and a GPT-2 FFN weight 3072x768, bf16 and fp32. Checked bit
for bit against the reference given the same uniforms, and at most 2 nonzeros per group of 4.
Every call draws with the same seed (reset untimed before the call), so each call's output is
checkable. Bytes: read x once, write the output once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernels.ops.mvue import mvue24_bytes, mvue24_nocheck, mvue24_reference, mvue24_uniforms
from repro.checks import rel_err
from repro.kbench.core import Case, KernelBench, require

SEED = 1234
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
FULL_SHAPES = [(8192, 8192), (3072, 768)]
SMOKE_SHAPES = [(16, 32)]


@dataclass
class Inputs:
    x: torch.Tensor
    seed: torch.Tensor  # int64 [1] on x's device, reset to SEED before every call


def _inputs(case: Case, device: torch.device, gen: torch.Generator) -> Inputs:
    r, c = case.args
    x = torch.randn(r, c, device=device, generator=gen).to(DTYPES[case.dtype])
    return Inputs(x, torch.tensor([SEED], dtype=torch.int64, device=device))


def _check(inp: Inputs, variant: str, out: torch.Tensor) -> dict[str, float]:
    ref = mvue24_reference(inp.x, u=mvue24_uniforms(SEED, inp.x.numel() // 4, inp.x.device))
    require(rel_err(out, ref) == 0.0, f"{variant} differs from the reference given the same uniforms")
    require(bool(((out != 0).reshape(-1, 4).sum(-1) <= 2).all()), "more than 2 nonzeros in a group of 4")
    return {}


MVUE = KernelBench(
    "mvue",
    __doc__,
    cases={
        "full": [Case(f"{r}x{c}", d, (r, c)) for r, c in FULL_SHAPES for d in DTYPES],
        "smoke": [Case(f"{r}x{c}", d, (r, c)) for r, c in SMOKE_SHAPES for d in DTYPES],
    },
    inputs=_inputs,
    check=_check,
    nbytes=lambda inp: mvue24_bytes(inp.x),
    setup=lambda inp: lambda: inp.seed.fill_(SEED),
)


@MVUE.variant(baseline=True, gate=False, doc="plain PyTorch reference from the same uniforms")
def reference(inp: Inputs) -> Callable[[], object]:
    u = mvue24_uniforms(SEED, inp.x.numel() // 4, inp.x.device)
    return lambda: mvue24_reference(inp.x, u=u)


@MVUE.variant(doc="Triton kernel, seed on the device (capturable)")
def triton(inp: Inputs) -> Callable[[], object]:
    return lambda: mvue24_nocheck(inp.x, seed_tensor=inp.seed)
