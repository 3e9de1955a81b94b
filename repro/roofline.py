"""Ceilings measured once per run on the device at hand (copy bandwidth, dense GEMM rate), and
the conversion of a timed op's bytes and FLOPs into GB/s, TFLOP/s and % of those ceilings."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from repro.timing import time_fn


@dataclass(frozen=True)
class Ceilings:
    copy_gbps: float  # device-to-device copy, bytes read + written
    gemm_tflops: float  # dense GEMM of ``gemm_dtype`` at a large square shape
    gemm_dtype: str
    copy_bytes: int
    gemm_n: int
    timer: str = ""  # how the copy was timed
    checked: bool = False  # the timed copy and GEMM outputs were checked after timing, and passed
    gemm_timer: str = ""  # how the GEMM was timed (graph-captured: the copy is not)


def measure_ceilings(device: torch.device, *, copy_mib: int | None = None, gemm_n: int | None = None) -> Ceilings:
    """Measure copy bandwidth and dense GEMM rate on ``device`` (small sizes on CPU)."""
    cuda = device.type == "cuda"
    copy_mib = copy_mib or (2048 if cuda else 64)
    gemm_n = gemm_n or (8192 if cuda else 512)
    n = copy_mib * 2**20 // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    # eager, not graph-captured: a captured device copy becomes a copy-engine memcpy node (slower)
    t = time_fn(partial(dst.copy_, src), device, graph=False)
    copy_timer = t.timer
    copy_gbps = 2 * n * 4 / (t.ms * 1e-3) / 1e9
    dtype = torch.bfloat16 if cuda else torch.float32
    dst.zero_()
    dst.copy_(src)
    copy_ok = torch.equal(dst, src)
    del src, dst
    a = torch.randn(gemm_n, gemm_n, device=device, dtype=dtype)
    b = torch.randn(gemm_n, gemm_n, device=device, dtype=dtype)
    t = time_fn(partial(torch.matmul, a, b), device)
    gemm_timer = t.timer
    tflops = 2 * gemm_n**3 / (t.ms * 1e-3) / 1e12
    rows = a[:8].double() @ b.double()  # a few rows of the product in float64
    got = torch.matmul(a, b)[:8].double()
    gemm_ok = bool(((got - rows).norm() / rows.norm()).item() < 2e-2)
    dt = str(dtype).replace("torch.", "")
    return Ceilings(
        copy_gbps, tflops, dt, 2 * n * 4, gemm_n, copy_timer, checked=copy_ok and gemm_ok, gemm_timer=gemm_timer
    )


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12
