"""2:4 GEMM plumbing: prune + compress a weight for cuSPARSELt through torch, search the
cuSPARSELt algorithm once per shape and cache it, and fall back to a dense masked GEMM (saying
why) on CPU, without cuSPARSELt, or at shapes/dtypes cuSPARSELt refuses.

Host cost note (../shared/notes/h100-measurements.md): each eager ``_cslt_sparse_mm`` call spends
0.6-1.0 ms of host time on an H100; the device-time gain shows only under CUDA-graph replay.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from kernels.ops.common import check_tensor
from kernels.ops.cslt_pack import (
    cslt_pack,
    cslt_pack_mvue_t,
    cslt_pack_pair,
    cslt_pack_pair_into,
    cslt_repack_pair_values,
    layout_matches,
)
from kernels.ops.nm_mask import nm_mask

# problem key -> cuSPARSELt configuration (alg_id, split_k, split_k_mode), chosen once per key
_ALG_CACHE: dict[tuple, tuple[int, int, int]] = {}
_DEFAULT_CONFIG = (0, 1, -1)
_CSLT_DTYPES = (torch.float16, torch.bfloat16)


@torch.compiler.assume_constant_result
def cusparselt_available() -> bool:
    """True when torch was built with cuSPARSELt and a CUDA device is present (a constant of the
    process: ``torch.compile`` takes its value at trace time instead of tracing the query)."""
    try:
        return bool(torch.cuda.is_available() and torch.backends.cusparselt.is_available())
    except AttributeError:
        return False


def cusparselt_version() -> int | None:
    try:
        return torch.backends.cusparselt.version() if torch.backends.cusparselt.is_available() else None
    except AttributeError:
        return None


def _is_24(mask: torch.Tensor) -> bool:
    g = mask.reshape(mask.shape[0], -1, 4).sum(-1)
    return bool((g == 2).all())


class Sparse24Weight:
    """A weight W [out, in] pruned to 2:4 along ``in`` and packed for cuSPARSELt.

    ``linear(x)`` computes ``x @ (W * mask).T`` like ``F.linear``. ``backend`` is "cusparselt" or
    "dense"; when dense, ``fallback_reason`` says why (and a warning is issued once per weight
    unless ``quiet``).
    """

    def __init__(self, weight: torch.Tensor, mask: torch.Tensor | None = None, *, quiet: bool = False) -> None:
        check_tensor("weight", weight, ndim=2)
        if weight.shape[1] % 4:
            raise ValueError(f"weight.shape[1]={weight.shape[1]} is not divisible by 4 (2:4 groups along in)")
        if mask is None:
            mask = nm_mask(weight, 2, 4, dim=1)
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be bool, got {mask.dtype}")
        if mask.shape != weight.shape:
            raise ValueError(f"mask shape {tuple(mask.shape)} != weight shape {tuple(weight.shape)}")
        if not _is_24(mask):
            raise ValueError("mask is not 2:4 along dim 1 (every group of 4 must keep exactly 2)")
        self.shape = tuple(weight.shape)
        self.dtype = weight.dtype
        self.mask = mask
        self.pruned = weight * mask
        self.fallback_reason = self._why_dense(weight)
        self.compressed: torch.Tensor | None = None
        if self.fallback_reason is None:
            try:
                self.compressed = torch._cslt_compress(self.pruned)
            except RuntimeError as e:  # cuSPARSELt refused this shape or dtype
                self.fallback_reason = f"cuSPARSELt compress failed: {e}".splitlines()[0]
        if self.fallback_reason and not quiet:
            warnings.warn(f"Sparse24Weight uses a dense fallback: {self.fallback_reason}", stacklevel=2)

    @property
    def backend(self) -> str:
        return "dense" if self.compressed is None else "cusparselt"

    def _why_dense(self, w: torch.Tensor) -> str | None:
        if not w.is_cuda:
            return "weight is not on a CUDA device"
        if not cusparselt_available():
            return "this torch build has no cuSPARSELt"
        if w.dtype not in _CSLT_DTYPES:
            return f"dtype {w.dtype} is not supported here (fp16, bf16)"
        r, q = w.shape
        if r % 32 or q % 64:
            return f"shape {r}x{q}: cuSPARSELt needs out % 32 == 0 and in % 64 == 0"
        return None

    def alg_id(self, x2d: torch.Tensor) -> int:
        """The cuSPARSELt algorithm chosen for this weight and batch size (:func:`_search_config`)."""
        return self._config(x2d)[0]

    def _config(self, x2d: torch.Tensor) -> tuple[int, int, int]:
        key = (self.shape, x2d.shape[0], self.dtype, x2d.device.index)
        return _search_config(self.compressed, x2d.t(), True, key)

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ (W * mask).T (+ bias)``; x must have the weight's dtype and device on either
        backend (the dense fallback once cast the weight to x's dtype: an int x truncated it)."""
        check_tensor("x", x, dtypes=(self.dtype,), min_ndim=1, finite=False)
        if x.device != self.pruned.device:
            raise ValueError(f"x is on {x.device}, the weight on {self.pruned.device}")
        if x.shape[-1] != self.shape[1]:
            raise ValueError(f"x has {x.shape[-1]} features, weight expects {self.shape[1]}")
        if self.compressed is None:
            return F.linear(x, self.pruned, bias)
        x2d = x.reshape(-1, x.shape[-1])
        y = _cslt_mm(self.compressed, x2d.t(), self._config(x2d), transpose_result=True)
        y = y.reshape(*x.shape[:-1], self.shape[0])
        return y if bias is None else y + bias


# --------------------------------------------------------------------------------------------
# per-call 2:4 GEMMs for training (the sparse operand changes every step: compress every call)
# --------------------------------------------------------------------------------------------


def cslt_refusal(a_rows: int, a_cols: int, b_cols: int, dtype: torch.dtype, device: torch.device) -> str | None:
    """Why cuSPARSELt cannot compute A [a_rows, a_cols] (2:4 along a_cols) @ B [a_cols, b_cols]
    here, or None when it can. Conservative: fp16/bf16 on CUDA, a_rows % 32 == 0,
    a_cols % 64 == 0 and b_cols a positive multiple of 16."""
    if device.type != "cuda":
        return f"tensors are on {device.type}, not on a CUDA device"
    if not cusparselt_available():
        return "this torch build has no cuSPARSELt"
    if dtype not in _CSLT_DTYPES:
        return f"dtype {str(dtype).replace('torch.', '')} is not supported by cuSPARSELt here (fp16, bf16)"
    if a_rows % 32 or a_cols % 64:
        return f"sparse operand {a_rows}x{a_cols}: cuSPARSELt needs rows % 32 == 0 and cols % 64 == 0"
    if b_cols <= 0 or b_cols % 16:
        return f"dense operand has {b_cols} columns: cuSPARSELt needs a positive multiple of 16"
    return None


# H100, torch 2.11 + cuSPARSELt 0.8.0: mm_search on fp16 with transpose_result=True fails with an
# internal error that leaves the CUDA context unusable (illegal instruction); the GEMM itself
# works with the default algorithm, so those problems are never searched.
_NO_SEARCH = {(torch.float16, True)}


def _cslt_mm(
    packed: torch.Tensor,
    b: torch.Tensor,
    config: tuple[int, int, int],
    *,
    transpose_result: bool,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``torch._cslt_sparse_mm`` with a configuration from :func:`_search_config` (split-K
    arguments passed only where they differ from the defaults)."""
    alg, split_k, mode = config
    kw = {} if (split_k, mode) == (1, -1) else {"split_k": split_k, "split_k_mode": mode}
    return torch._cslt_sparse_mm(packed, b, bias, transpose_result=transpose_result, alg_id=alg, **kw)


def _replay_ms(fn: Callable[[], object], calls: int = 3, reps: int = 5) -> float:
    """Median device ms of ``fn`` from CUDA-graph replays (no host overhead in the timing)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up, outside the graph
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    del graph
    return sorted(times)[len(times) // 2]


def _search_config(compressed: torch.Tensor, b: torch.Tensor, transpose_result: bool, key: tuple) -> tuple:
    """Fastest cuSPARSELt configuration for this problem, chosen once per key and cached.

    ``mm_search`` names one configuration (and how many algorithms there are), from its own
    short timing; on an H100 it was up to 3.2% slower than the best of the rest
    (results/tuning/h100_probe_cslt_algs.txt). So every alg_id with split_k = 1, and the searched
    configuration, is timed by CUDA-graph replay and the fastest kept. Never searches while a
    CUDA graph is being captured (the search times kernels): then the default, not cached."""
    if key in _ALG_CACHE:
        return _ALG_CACHE[key]
    if (b.dtype, transpose_result) in _NO_SEARCH:
        _ALG_CACHE[key] = _DEFAULT_CONFIG
        return _DEFAULT_CONFIG
    if torch.cuda.is_current_stream_capturing():
        return _DEFAULT_CONFIG
    try:
        found = torch._C._cusparselt.mm_search(compressed, b, None, None, None, transpose_result)
    except (AttributeError, RuntimeError, TypeError):
        _ALG_CACHE[key] = _DEFAULT_CONFIG
        return _DEFAULT_CONFIG
    found = tuple(int(v) for v in (found if isinstance(found, tuple) else (found,)))
    searched = (found[0], *(found[1:3] if len(found) >= 3 else (1, -1)))
    candidates = [searched] + [(alg, 1, -1) for alg in range(found[3] if len(found) > 3 else 0)]
    best, best_ms = searched, float("inf")
    for cfg in dict.fromkeys(candidates):  # the searched one first: it wins ties
        try:
            ms = _replay_ms(lambda cfg=cfg: _cslt_mm(compressed, b, cfg, transpose_result=transpose_result))
        except RuntimeError:  # a configuration this problem does not take
            continue
        if ms < best_ms:
            best, best_ms = cfg, ms
    _ALG_CACHE[key] = best
    return best


def pack_operand(a: torch.Tensor, mask: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a`` (times ``mask``; 2:4 along its rows) packed for ``torch._cslt_sparse_mm`` in ``dtype``
    (default: a's): our one-pass packer (``kernels.ops.cslt_pack``) where its layout was verified equal to
    cuSPARSELt's on this device and dtype, else ``torch._cslt_compress``. No checks (graph-safe)."""
    dt = a.dtype if dtype is None else dtype
    if layout_matches(a.device, dt):
        return cslt_pack(a, mask, dtype=dt, check=False)
    a = a.to(dt)
    return torch._cslt_compress(a if mask is None else torch.where(mask, a, 0.0))


def pack_pair_operands(
    w: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed W*M, packed (W*M)^T) for a transposable 2:4 mask, from one read of ``w`` where our
    packer runs (see :func:`pack_operand`), else two ``torch._cslt_compress`` calls."""
    dt = w.dtype if dtype is None else dtype
    if layout_matches(w.device, dt):
        return cslt_pack_pair(w, mask, dtype=dt, check=False)
    wm = torch.where(mask, w.to(dt), 0.0)
    return torch._cslt_compress(wm), torch._cslt_compress(wm.t().contiguous())


def refresh_pair_operands(
    w: torch.Tensor,
    mask: torch.Tensor,
    pair: tuple[torch.Tensor, torch.Tensor],
    *,
    values_only: bool,
    pruned: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bring a pair from :func:`pack_pair_operands` up to date with ``w`` (and ``mask``), in
    place where possible, so CUDA graphs that hold the buffers see it. ``values_only=True`` (the
    mask is the one the pair was packed with; the per-step path) rewrites only the kept values
    from one read of ``w``; ``False`` repacks values and metadata (after a mask change). Returns
    the pair (new tensors only where our packer is not verified here and torch's layout changed
    size). ``pruned`` (values-only refresh with our packer only): also receives the pruned
    entries (:func:`kernels.ops.cslt_pack.cslt_repack_pair_values`)."""
    dt = pair[0].dtype
    if pruned is not None and not (values_only and layout_matches(w.device, dt)):
        raise ValueError("pruned entries are written only by a values-only refresh with our packer")
    if layout_matches(w.device, dt):
        if values_only:
            if w.dtype not in (torch.float32, dt):  # e.g. an fp16 weight under bf16 autocast
                w = w.to(dt)
            cslt_repack_pair_values(w, *pair, pruned)
        else:
            cslt_pack_pair_into(w, mask, *pair, check=False)
        return pair
    new = pack_pair_operands(w, mask, dt)
    if all(a.shape == b.shape for a, b in zip(new, pair, strict=True)):
        for old, fresh in zip(pair, new, strict=True):
            old.copy_(fresh)
        return pair
    return new


def pack_mvue_t_operand(x: torch.Tensor, seed_tensor: torch.Tensor) -> torch.Tensor | None:
    """Packed MVUE(x^T) for x [T, n] in one pass (:func:`kernels.ops.cslt_pack.cslt_pack_mvue_t`), or
    None where our layout is not verified on this device (the caller then runs MVUE and
    :func:`pack_operand`)."""
    if not layout_matches(x.device, x.dtype):
        return None
    return cslt_pack_mvue_t(x, seed_tensor)


_BIAS_FUSED: dict[tuple, bool] = {}


def _bias_fuses(device: torch.device, dtype: torch.dtype, transpose_result: bool, b_row_major: bool) -> bool:
    """Whether cuSPARSELt's fused bias (``_cslt_sparse_mm(..., bias)``) adds one value per row of
    A here, checked once per (device, dtype, B and result layouts) on a small problem against a
    separate add; never during a graph capture (then False, uncached)."""
    key = (str(device), dtype, transpose_result, b_row_major)
    if key in _BIAS_FUSED:
        return _BIAS_FUSED[key]
    if torch.cuda.is_current_stream_capturing():
        return False
    g = torch.Generator(device=device).manual_seed(1)
    a = torch.randn(64, 128, device=device, generator=g).to(dtype)
    a = a * nm_mask(a, 2, 4)
    b = torch.randn(128, 32, device=device, generator=g).to(dtype)
    if not b_row_major:
        b = b.t().contiguous().t()
    bias = torch.randn(64, device=device, generator=g).to(dtype)
    packed = pack_operand(a)
    try:
        fused = torch._cslt_sparse_mm(packed, b, bias, transpose_result=transpose_result).float()
        plain = torch._cslt_sparse_mm(packed, b, transpose_result=transpose_result).float()
        plain += bias.float()[None, :] if transpose_result else bias.float()[:, None]
        ok = bool(((fused - plain).abs() <= 1e-2 * plain.abs().max()).all())
    except (RuntimeError, TypeError):
        ok = False
    _BIAS_FUSED[key] = ok
    return ok


def cslt_mm_packed(
    packed: torch.Tensor,
    a_shape: tuple[int, int],
    b: torch.Tensor,
    *,
    transpose_result: bool = False,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """A @ B (+ bias, one value per row of A) on cuSPARSELt with A [m, k] = ``a_shape`` already
    packed (:func:`pack_operand`), B [k, n]; the algorithm is searched once per problem and
    cached. ``transpose_result=True`` returns (A @ B).T, [n, m] row-major. The bias goes into the
    GEMM's epilogue where that was checked to give the same sums, else it is added afterwards."""
    key = ("mm", tuple(a_shape), tuple(b.shape), b.stride(), transpose_result, b.dtype, b.device.index)
    cfg = _search_config(packed, b, transpose_result, key)
    if bias is not None and _bias_fuses(b.device, b.dtype, transpose_result, b.is_contiguous()):
        return _cslt_mm(packed, b, cfg, transpose_result=transpose_result, bias=bias.to(b.dtype))
    y = _cslt_mm(packed, b, cfg, transpose_result=transpose_result)
    if bias is not None:
        y.add_(bias.to(y.dtype)[None, :] if transpose_result else bias.to(y.dtype)[:, None])
    return y


def cslt_sparse_mm(a: torch.Tensor, b: torch.Tensor, *, transpose_result: bool = False) -> torch.Tensor:
    """A @ B on cuSPARSELt, A [m, k] row-major and 2:4 along k (its pruned dense form), B [k, n].

    A is packed on every call (in training it changes every step; the packing is part of the
    step and can be captured in a CUDA graph): :func:`pack_operand`. The algorithm is searched
    once per (shapes, layout, dtype, device) and cached. ``transpose_result=True`` returns
    (A @ B).T, [n, m] row-major. No checks and no fallback here: the caller has made sure that
    :func:`cslt_refusal` is None and that A is 2:4.
    """
    return cslt_mm_packed(pack_operand(a), tuple(a.shape), b, transpose_result=transpose_result)
