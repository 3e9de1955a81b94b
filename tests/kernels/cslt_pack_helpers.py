"""Helpers shared by the cslt_pack tests: the recorded-layout fixture, dtypes, random 2:4 masks,
16-bit views, and a float64 reference of the gated backward."""

from __future__ import annotations

from pathlib import Path

import torch

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cslt_layout_h100.pt"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
CUDA = torch.cuda.is_available()


def rand24(m: int, k: int, gen: torch.Generator, device: str = "cpu") -> torch.Tensor:
    idx = torch.rand(m, k // 4, 4, generator=gen).topk(2, -1).indices
    mask = torch.zeros(m, k // 4, 4, dtype=torch.bool).scatter_(-1, idx, True)
    return mask.reshape(m, k).to(device)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.int16)


def fixture_cases() -> list[dict]:
    return torch.load(FIXTURE, weights_only=False)["cases"]


def gated_reference64(z: torch.Tensor, g: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated backward in float64 (tanh GELU for GEGLU) and a tolerance: one ulp of the 16-bit
    dtype, plus the fp32 cancellation of 1 + tanh far left (torch's float64 tanh form has it too)."""
    gate, up = z.double().chunk(2, dim=-1)
    gd = g.double()
    if kind == "geglu":
        a = torch.nn.functional.gelu(gate, approximate="tanh")
        dgate = torch.ops.aten.gelu_backward(gd * up, gate, approximate="tanh")
    else:
        a, dgate = torch.nn.functional.silu(gate), torch.ops.aten.silu_backward(gd * up, gate)
    ref = torch.cat([dgate, gd * a], dim=-1)
    fi = torch.finfo(z.dtype)
    scale = gd.abs() * (gate.abs() + up.abs() + 1)
    return ref, fi.eps * ref.abs().clamp_min(fi.tiny) + 1e-5 * torch.cat([scale, scale], dim=-1)
