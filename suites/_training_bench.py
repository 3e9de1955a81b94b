"""Shared pieces of the 2:4 training-speed suites (figure6, table8): layer factories per mode, the
fwd+bwd call that gets graph-captured, the correctness check every timed module passes first, and
the six FFN GEMMs timed dense and 2:4 on their own (the GEMM-level ceiling of any speedup).

Modes: ``dense`` (nn.Linear), ``half`` (dense, FFN inner width halved: the iso-FLOP baseline) and
the SparseLinear modes ``fst``, ``weight24``, ``srste``. Sparse layers run with ``checks=False``
and ``track_flip=False`` (no host syncs, so fwd+bwd can be captured in a CUDA graph)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable

import torch
from torch import nn

from repro.models.gpt2 import GPT2Config

SPARSE_MODES = ("fst", "weight24", "srste")


def factory(mode: str) -> Callable[..., nn.Module] | None:
    """Linear factory for the FFN linears of ``mode`` (None: nn.Linear)."""
    if mode in ("dense", "half"):
        return None
    from kernels.sparse_linear import SparseLinear

    return functools.partial(SparseLinear, mode=mode, checks=False, track_flip=False)


def mode_config(cfg: GPT2Config, mode: str) -> GPT2Config:
    """``cfg`` with the FFN of ``mode`` (half: d_ff halved)."""
    return dataclasses.replace(cfg, ffn_mode=mode)


AMP_DTYPE = torch.bfloat16
"""Compute dtype of the timed runs: float32 master weights under ``torch.autocast`` in this dtype
(mixed precision, as Hu et al. measure: "FP16 mixed precision training is used on all models")."""


def amp(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast to :data:`AMP_DTYPE` on CUDA (no weight-cast cache: every call casts, as every
    training step does after its optimizer update); a no-op elsewhere (CPU smoke runs in fp32)."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=AMP_DTYPE, cache_enabled=False)


def fwd_bwd(module: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], None]:
    """One forward and backward of ``module`` on a static input under :func:`amp` (input gradient
    included, as inside a network); parameter gradients accumulate in place across calls (the
    same for all modes)."""

    def call() -> None:
        x.grad = None
        with amp(x.device):
            y = module(x)
        y.backward(dy)

    return call


def sparse_layers(module: nn.Module) -> list[nn.Module]:
    from kernels.sparse_linear import SparseLinear

    return [m for m in module.modules() if isinstance(m, SparseLinear) and not m.is_dense]


@torch.no_grad()
def masked_dense_twin(module: nn.Module, build_dense: Callable[[], nn.Module]) -> nn.Module:
    """A dense float32 copy of ``module`` whose sparse linears' weights are multiplied by their
    current masks: the reference of the sparse module's forward and input gradient."""
    ref = build_dense().to(device=next(module.parameters()).device, dtype=torch.float32)
    state = {k: v.float() for k, v in module.state_dict().items()}
    sparse = set(sparse_layers(module))  # once, not per module
    for name, m in module.named_modules():
        if m in sparse:
            state[f"{name}.weight" if name else "weight"] = m.weight.float() * m.mask  # "" = module itself
    ref.load_state_dict(state, strict=True)
    return ref


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_against_twin(
    module: nn.Module, build_dense: Callable[[], nn.Module], x: torch.Tensor, dy: torch.Tensor
) -> tuple[float, float]:
    """Relative errors of output and input gradient vs the masked dense float32 twin."""
    x1 = x.detach().clone().requires_grad_(True)
    with amp(x.device):
        y = module(x1)
    y.backward(dy)
    ref = masked_dense_twin(module, build_dense)
    x2 = x.detach().float().clone().requires_grad_(True)
    y2 = ref(x2)
    y2.backward(dy.float())
    for p in module.parameters():
        p.grad = None
    return rel_err(y, y2), rel_err(x1.grad, x2.grad)


_GEMM_CACHE: dict[tuple, tuple[float, float]] = {}


def ffn_gemm_times(ctx, d: int, f: int, tokens: int) -> tuple[float, float] | None:
    """(dense ms, 2:4 ms) of the six GEMMs of one FFN's fwd+bwd at [tokens, d] -> [tokens, f] ->
    [tokens, d], timed on their own (graph replays), operands already packed, in the layouts the
    modules use (``nn.Linear``'s for dense; fst's column-major inner activation for 2:4). No
    packing, MVUE, activation or bias work: the time any FFN speedup is bounded by. None where
    cuSPARSELt refuses the shapes. Cached per (d, f, tokens) within a process."""
    from functools import partial

    from kernels.nm_mask import nm_mask
    from kernels.sparse_gemm import cslt_mm_packed, cslt_refusal, pack_operand, pack_pair_operands
    from kernels.transposable import transposable_mask

    key = (d, f, tokens, str(ctx.device))
    if key in _GEMM_CACHE:
        return _GEMM_CACHE[key]
    dev, bf = ctx.device, AMP_DTYPE
    if dev.type != "cuda" or cslt_refusal(f, d, tokens, bf, dev) or cslt_refusal(d, f, tokens, bf, dev):
        return None
    g = torch.Generator(device=dev).manual_seed(2)
    w1, w2 = torch.randn(f, d, device=dev, generator=g), torch.randn(d, f, device=dev, generator=g)
    q1, q1t = pack_pair_operands(w1, transposable_mask(w1), bf)
    q2, q2t = pack_pair_operands(w2, transposable_mask(w2), bf)
    x = torch.randn(tokens, d, device=dev, dtype=bf, generator=g)
    ht = torch.randn(f, tokens, device=dev, dtype=bf, generator=g)  # column-major H (and G) as [f, T]
    dy = torch.randn(tokens, d, device=dev, dtype=bf, generator=g)
    dht = torch.randn(f, tokens, device=dev, dtype=bf, generator=g)
    sparse_rows = torch.randn(d, tokens, device=dev, dtype=bf, generator=g)
    qy = pack_operand(sparse_rows, nm_mask(sparse_rows, 2, 4, dim=1))  # 2:4 [d, T], as MVUE(dY^T)
    qh = pack_operand(dht, nm_mask(dht, 2, 4, dim=1))  # as MVUE(dH^T)
    sparse = [  # fwd fc, fwd proj, dX proj, dX fc, dW proj, dW fc
        partial(cslt_mm_packed, q1, (f, d), x.t(), transpose_result=False),
        partial(cslt_mm_packed, q2, (d, f), ht, transpose_result=True),
        partial(cslt_mm_packed, q2t, (f, d), dy.t(), transpose_result=False),
        partial(cslt_mm_packed, q1t, (d, f), dht, transpose_result=True),
        partial(cslt_mm_packed, qy, (d, tokens), ht.t()),
        partial(cslt_mm_packed, qh, (f, tokens), x),
    ]
    h, dh = ht.t().contiguous(), dht.t().contiguous()
    w1b, w2b = w1.to(bf), w2.to(bf)
    dense = [
        partial(torch.matmul, x, w1b.t()),
        partial(torch.matmul, h, w2b.t()),
        partial(torch.matmul, dy, w2b),
        partial(torch.matmul, dh, w1b),
        partial(torch.matmul, dy.t(), h),
        partial(torch.matmul, dh.t(), x),
    ]
    t_dense = ctx.time(lambda: [fn() for fn in dense]).ms
    t_sparse = ctx.time(lambda: [fn() for fn in sparse]).ms
    _GEMM_CACHE[key] = (t_dense, t_sparse)
    return t_dense, t_sparse
