"""suites.table3: the GEGLU baselines include torch.compile's form of the plain-PyTorch expression."""

from __future__ import annotations

import torch

from repro.kbench.geglu import GEGLU


def test_the_compiled_baseline_is_checked_like_the_others_and_stays_out_of_the_gate():
    """Only eager PyTorch stood beside the kernels; an expert's baseline is the compiled form."""
    v = GEGLU.variants["torch_compiled"]
    assert not v.gate and not v.baseline
    case = GEGLU.cases("smoke")[0]
    inp = GEGLU.inputs(case, torch.device("cpu"), torch.Generator().manual_seed(0))
    out = v(inp)()
    assert GEGLU.check(inp, "torch_compiled", out)["rel_err_vs_fp64"] <= 2e-3
