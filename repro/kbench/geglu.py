"""GEGLU forward on fp16 column-major input 32x512xd (Hu et al. Table 3; d = input width, the output
has d/2 columns): the column-major-aware Triton kernel (ours) vs the "intuitive" row-walking
kernel (the paper's baseline) vs torch eager ``gelu(gate) * up`` and its ``torch.compile``d form.
Bytes per call: read the input once, write the output once. Read by ``suites/table3.py`` and
``tests/benchmarks/test_bench_geglu.py``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from kernels.ops.geglu import geglu, geglu_bytes, geglu_intuitive
from repro.checks import rel_err
from repro.kbench.core import Case, KernelBench, require

APPROXIMATE = "tanh"
TOL = 2e-3  # relative error vs a float64 GEGLU
FULL_SHAPES = [(32, 512, d) for d in (768, 1024, 1280, 1600, 2048, 4096, 8192)]
GATE_WIDTHS = (768, 2048, 8192)  # the regression set: smallest, middle and largest width
SMOKE_SHAPES = [(2, 16, 32), (2, 32, 64), (4, 32, 128)]


def torch_eager(z: torch.Tensor) -> torch.Tensor:
    r = z.shape[-1] // 2
    return torch.nn.functional.gelu(z[:, :r], approximate=APPROXIMATE) * z[:, r:]


@dataclass
class Inputs:
    z: torch.Tensor  # [b*s, d], column-major

    @cached_property
    def ref(self) -> torch.Tensor:
        return torch_eager(self.z.double())


def _inputs(case: Case, device: torch.device, gen: torch.Generator) -> Inputs:
    b, s, d = case.args
    return Inputs(torch.randn(d, b * s, device=device, dtype=torch.float16, generator=gen).t())


def _check(inp: Inputs, variant: str, out: torch.Tensor) -> dict[str, float]:
    err = rel_err(out, inp.ref)  # +inf on NaN/Inf
    require(err <= TOL, f"{variant} rel err {err:.2e}")
    if variant == "ours":
        z = inp.z
        require(out.stride() == (1, z.shape[0]), f"ours output is not column-major {out.stride()}")
    return {"rel_err_vs_fp64": err}


GEGLU = KernelBench(
    "geglu",
    __doc__,
    cases={
        "full": [Case(f"{b}x{s}x{d}", "fp16", (b, s, d), d in GATE_WIDTHS) for b, s, d in FULL_SHAPES],
        "smoke": [Case(f"{b}x{s}x{d}", "fp16", (b, s, d), i == 0) for i, (b, s, d) in enumerate(SMOKE_SHAPES)],
    },
    inputs=_inputs,
    check=_check,
    nbytes=lambda inp: geglu_bytes(inp.z),
)


@GEGLU.variant(baseline=True, doc="row-wise access of the column-major tensor, Triton (paper's baseline)")
def intuitive(inp: Inputs):
    return lambda: geglu_intuitive(inp.z, approximate=APPROXIMATE, check_finite=False)


@GEGLU.variant(doc="column-major-aware Triton kernel")
def ours(inp: Inputs):
    return lambda: geglu(inp.z, approximate=APPROXIMATE, check_finite=False)


@GEGLU.variant(name="torch_eager", doc="torch eager gelu(gate, approximate='tanh') * up on the strided views")
def torch_eager_call(inp: Inputs):
    return lambda: torch_eager(inp.z)


_COMPILED = {}


@GEGLU.variant(
    name="torch_compiled",
    gate=False,  # a baseline for the suite's ratios; the gate keeps its committed benchmarks
    doc="torch.compile of the same expression (Inductor fuses gelu and the product into one kernel)",
)
def torch_compiled_call(inp: Inputs):
    if "fn" not in _COMPILED:  # one compiled function; each shape compiles at its first (checked) call
        _COMPILED["fn"] = torch.compile(torch_eager, dynamic=False)
    fn = _COMPILED["fn"]
    return lambda: fn(inp.z)
