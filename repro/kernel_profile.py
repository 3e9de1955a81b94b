"""Where a call's device time goes: the CUDA kernels of one call, recorded with ``torch.profiler``
after warm-up and summed by category (GEMMs, attention, activation, weight refresh, MVUE packs,
masked decay, casts, norms, loss, optimizer, the rest). The embedding's kernels (gathers, its
backward's sort and segment sums) carry no name of their own and count as the rest.

Why a profile and not one timing per part: the parts of a training step are many small kernels
whose sum, set beside the call's graph-replay time, shows what is left (launch gaps); timing each
part on its own (figure6's ``part_*`` rows) cannot show that, nor the GEMMs inside a module.
``fn`` may be a CUDA graph's ``replay``: CUPTI reports every kernel of a replay (checked on an
H100: 3197 of the eager step's 3199 kernels at GPT-2 774M, summing to within 1% of the replay
time), and the suites profile the replay they timed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import torch

# (category, pattern on the kernel name), first match wins. Our Triton kernels keep their function
# names; cuBLAS / cuSPARSELt / CUTLASS GEMMs are named after their tile machinery.
CATEGORIES: tuple[tuple[str, str], ...] = (
    ("activation bwd + MVUE pack (fused)", r"_act_bwd_mvue_pack_kernel|_gated_bwd_mvue_pack_kernel"),
    ("MVUE pack", r"_mvue_pack_kernel|mvue"),
    ("weight refresh (prune + pack)", r"_repack_pair_values_kernel|_pack_kernel|compress|transposable"),
    ("masked decay + grad cast", r"_decay_cast_pruned_kernel|masked_decay"),
    ("attention", r"flash|fmha|attention|sdpa"),
    ("GEMMs", r"gemm|nvjet|xmma|cutlass|cublas|sparse_mm|spmma|sm\d+_.*(tensorop|hmma|s16816|gmma)"),
    ("activation", r"gelu|geglu|silu|_fwd_flat_kernel|_bwd_flat_kernel|_rows_kernel"),
    ("layer norm", r"layer_norm|layernorm|GammaBeta"),
    ("loss (softmax, cross-entropy)", r"softmax|nll_loss|cross_entropy"),
    ("optimizer + grad clipping", r"multi_tensor_apply|adam|foreach|lpnorm|_amp_"),
    ("casts", r"copy|_to_copy|convert"),
)
REST = "the rest"
ORDER: tuple[str, ...] = (
    "GEMMs",
    "attention",
    "activation",
    "activation bwd + MVUE pack (fused)",
    "MVUE pack",
    "weight refresh (prune + pack)",
    "masked decay + grad cast",
    "casts",
    "layer norm",
    "loss (softmax, cross-entropy)",
    "optimizer + grad clipping",
    REST,
)
"""Every category, in the order a breakdown lists them (stacked bars, tables): the GEMMs first."""

_COMPILED = tuple((c, re.compile(p, re.IGNORECASE)) for c, p in CATEGORIES)


def categorize(name: str) -> str:
    """The category of a CUDA kernel (or memcpy / memset) by its name; :data:`REST` if none fits."""
    for category, pattern in _COMPILED:
        if pattern.search(name):
            return category
    return REST


def by_category(kernels: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Milliseconds per category (every category of :data:`ORDER`, zero where none ran)."""
    out = dict.fromkeys(ORDER, 0.0)
    for name, ms in kernels:
        out[categorize(name)] += ms
    return out


def _device_events(prof: torch.profiler.profile) -> list[tuple[str, float]]:
    kernels = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        kernels.append((e.name, e.time_range.elapsed_us() / 1e3))
    return kernels


def kernel_times(fn: Callable[[], object], device: torch.device, warmup: int = 3) -> list[tuple[str, float]]:
    """(kernel name, ms) of every device kernel, memcpy and memset of one call of ``fn`` on the
    CUDA ``device``, after ``warmup`` calls. Raises RuntimeError where the profiler records no
    device activity (a CPU-only build, or no CUPTI): a breakdown is never silently empty."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"kernel_times needs a CUDA device, got {device}")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        fn()
        torch.cuda.synchronize(device)
    kernels = _device_events(prof)
    if not kernels:
        raise RuntimeError("torch.profiler recorded no device kernels (no CUPTI?): no breakdown")
    return kernels


__all__ = ["CATEGORIES", "ORDER", "REST", "by_category", "categorize", "kernel_times"]
