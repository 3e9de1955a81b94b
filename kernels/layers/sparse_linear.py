"""``SparseLinear``: a drop-in ``nn.Linear`` for 2:4 sparse training.

Modes (Hu et al. 2024, "Accelerating Transformer Pre-training with 2:4 Sparsity"):

* ``fst`` (fully sparse training): a transposable 2:4 mask M (every 4x4 tile keeps 2 per row and
  column, so W*M is 2:4 along ``in`` and its transpose 2:4 along ``out``). All three GEMMs are
  2:4: Y = X (W*M)^T, dX = dY (W*M) through the transposed sparse weight, and
  dW = MVUE(dY^T) X with the unbiased minimum-variance 2:4 estimator applied to dY^T along the
  token dimension. Masked decay on the gradient: dW += decay * W * ~M.
* ``srste``: SR-STE. M = 2:4 magnitude mask along ``in``, recomputed in every forward; forward
  sparse, backward straight-through with dense GEMMs, plus dW += decay * W * ~M.
* ``weight24``: torchao's design: transposable mask as fst, forward and dX sparse, dW dense
  (two of three GEMMs 2:4), plus masked decay.
* ``dense``: a plain linear layer (same class, so a model switches mode by a config string).

The weight is an ordinary dense ``nn.Parameter`` (the master copy); the optimizer updates it
densely and the forward prunes it with the current mask. ``decay`` is lambda_W of Hu et al.

Mask schedule protocol: the training loop calls ``after_optimizer_step(step, total_steps)`` on
every module that has it, after each ``optimizer.step()``, with ``step`` the number of optimizer
steps completed so far (1 after the first step). fst/weight24 refresh the mask when
``step % mask_interval == 0`` and switch to dense for good once
``step >= (1 - dense_fraction) * total_steps`` (Hu et al.'s dense fine-tuning; 0 disables; srste
never switches by itself). ``flip_rate`` is the fraction of mask entries changed since the
previous step (fst/weight24 with ``track_flip``: the candidate mask is computed every step even
though it is applied every ``mask_interval`` steps; srste: the mask of the last forward vs the
one before).

GEMM backend: on CUDA with cuSPARSELt, fp16/bf16 and shapes it accepts, every 2:4 GEMM runs on
``torch._cslt_sparse_mm`` (operand compressed in the forward/backward, alg_id searched once per
problem and cached); elsewhere a dense fallback computes the same math with dense matmuls of the
pruned / MVUE'd operands and warns once saying why (``backend``, ``fallback_reason``).

CUDA graphs: with ``checks=False`` nothing in the
forward or backward syncs with the host: no value scans, the MVUE seed is an int64 device tensor
(``mvue_seed``) that the kernel reads and that is incremented on the device after each use (every
replay draws afresh), and the mask lives in a persistent buffer that ``after_optimizer_step``
(outside the graph) overwrites in place. Switching to dense changes the computation: a captured
graph must be re-captured when ``is_dense`` changes. The first forward (eager warm-up) computes
the initial mask and searches the cuSPARSELt algorithms; capture after it.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

import kernels.ops.compile_ops as compile_ops
import kernels.ops.sparse_gemm as _sparse_gemm
from kernels.ops.common import FLOAT_DTYPES, check_tensor
from kernels.ops.common import as_2d as _as_2d
from kernels.ops.common import autocast_enabled as _autocast_enabled
from kernels.ops.common import no_autocast as _no_autocast
from kernels.ops.cslt_pack import cslt_decay_cast_pruned
from kernels.ops.masked_decay import masked_decay_, masked_decay_cast_nocheck
from kernels.ops.mvue import check_mvue_input as _mvue_validate
from kernels.ops.mvue import check_output_range as _check_output_range
from kernels.ops.mvue import mvue24_nocheck, mvue24_seed_tensor
from kernels.ops.nm_mask import nm24_mask
from kernels.ops.sparse_gemm import (
    cslt_mm_packed,
    cslt_refusal,
    cslt_sparse_mm,
    pack_mvue_t_operand,
    pack_operand,
    pack_pair_operands,
    refresh_pair_operands,
)
from kernels.ops.transposable import transposable_mask

MODES = ("fst", "srste", "weight24", "dense")
"""Valid ``mode`` strings. (The "half" baseline, FFN width halved, is a model-level choice.)"""

"""When True every SparseLinear skips its value checks (as with ``checks=False``): for timed and
CUDA-graph-captured runs."""

_TRANSPOSABLE_MODES = ("fst", "weight24")


class _Unset:
    """'Not known yet' for the last backend reason (None means: no fallback). One instance that
    copies and pickles as itself, so a deep-copied layer still knows it has not run."""

    def __deepcopy__(self, memo: dict) -> _Unset:
        return self

    def __copy__(self) -> _Unset:
        return self

    def __reduce__(self) -> str:
        return "_UNSET"


_UNSET = _Unset()


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


@dataclass(frozen=True)
class _Plan:
    """What one forward/backward does (fixed at forward time, read again by the backward)."""

    mode: str
    decay: float
    cslt: bool
    checks: bool
    device_type: str
    col_out: bool = False
    mvue: bool = True  # fst: dW from MVUE(dY^T) (False: the exact dense dY^T X, for ablations)


class GradHandoff:
    """A slot, one per forward of an fst layer, through which the module that consumes the layer's
    output may hand the layer's backward its weight-gradient operand already packed: packed
    MVUE(dY^T), computed together with dY itself (``kernels.layers.sparse_activation.fst_gelu`` and
    ``fst_gated``: the GELU or GEGLU/SwiGLU backward fused with the pack). The backward uses it
    only for the very tensor it was made from (same storage, shape, strides and version), else
    packs dY itself."""

    __slots__ = ("plan", "layer_seed", "_key", "_packed")

    def __init__(self, plan: _Plan, layer_seed: torch.Tensor | None) -> None:
        self.plan = plan
        self.layer_seed = layer_seed  # the layer's MVUE seed tensor: the packer draws with it
        self._key: tuple | None = None
        self._packed: torch.Tensor | None = None

    @property
    def wants_packed_grad(self) -> bool:
        """Whether the backward packs MVUE(dY^T) for a cuSPARSELt GEMM on the graph-safe path."""
        plan = self.plan
        return plan.mode == "fst" and plan.mvue and plan.cslt and not plan.checks and self.layer_seed is not None

    @staticmethod
    def _key_of(t: torch.Tensor) -> tuple:
        return (t.data_ptr(), tuple(t.shape), t.stride(), t._version, t.dtype)

    def offer(self, dy2d: torch.Tensor, packed: torch.Tensor) -> None:
        """Hand over ``packed`` = packed MVUE(dy2d^T) for the gradient ``dy2d`` [T, out]."""
        self._key, self._packed = self._key_of(dy2d), packed

    def take(self, dy2d: torch.Tensor) -> torch.Tensor | None:
        """The packed operand offered for exactly this ``dy2d`` (then forgotten), or None."""
        packed, key = self._packed, self._key
        self._key = self._packed = None
        return packed if packed is not None and key == self._key_of(dy2d) else None


OUTPUT_LAYOUTS = ("row", "col")
"""Valid ``output_layout`` values of :class:`SparseLinear`."""


def _fst_weight_grad(
    dy2d: torch.Tensor, x2d: torch.Tensor, seed: torch.Tensor, plan: _Plan, handoff: GradHandoff | None = None
) -> torch.Tensor:
    """dW = MVUE(dY^T along tokens) @ X: [out, T] 2:4 along T, so this GEMM is 2:4 too. On the
    cuSPARSELt path MVUE, the transpose and the packing are one pass over dY
    (``kernels.ops.cslt_pack.cslt_pack_mvue_t``; same draws as ``mvue24_nocheck``)."""
    t = dy2d.shape[0]
    packed = handoff.take(dy2d) if handoff is not None else None
    if packed is not None:  # MVUE(dY^T) packed by whoever computed dY, in the same pass
        return cslt_mm_packed(packed, (dy2d.shape[1], t), x2d, transpose_result=False)
    pad = (-t) % 4
    # one scan of dY (zero tokens change neither finiteness nor max|dY|; padded only to satisfy
    # the validator's group-size check in the rare unaligned case)
    amax = _mvue_validate(F.pad(dy2d, (0, 0, 0, pad)) if pad else dy2d, 0)[2] if plan.checks else None
    if plan.cslt:  # only when T % 64 == 0, so never padded
        if amax is not None and amax > torch.finfo(dy2d.dtype).max / 2:
            raise ValueError(f"MVUE of grad_output could overflow {_dtype_name(dy2d.dtype)} (max|dY| = {amax:.3e})")
        packed = pack_mvue_t_operand(dy2d, seed)
        if packed is not None:
            return cslt_mm_packed(packed, (dy2d.shape[1], t), x2d, transpose_result=False)
    dyt = dy2d.t().contiguous()  # [out, T]: groups of 4 consecutive tokens per output feature
    if pad:  # zero tokens contribute nothing and keep the estimator unbiased
        dyt = F.pad(dyt, (0, pad))
    g = mvue24_nocheck(dyt, -1, seed_tensor=seed)
    if amax is not None:
        _check_output_range(g, amax)
    if pad:
        g = g[:, :t]
    if plan.cslt:
        return cslt_sparse_mm(g, x2d, transpose_result=False)
    return g @ x2d


class _SparseLinearFn(torch.autograd.Function):
    """Y = X (W*M)^T + b with the backward of the mode; autocast is off inside (inputs arrive in
    the compute dtype; the master weight is cast here so dW and the decay come out in its dtype).

    Layouts: X may be row- or column-major (both read without a copy); Y is column-major (a
    transposed view of a contiguous [out, T] buffer) when ``plan.col_out``; dX has X's layout."""

    @staticmethod
    def forward(ctx, x, weight, bias, mask, seed, plan, pair, handoff):
        dt = x.dtype
        x2d = _as_2d(x, x.shape[-1])
        wm = packed_t = None
        ctx.decay_from = None  # (pruned entries, pack(W*M)) where the backward decays from them
        if plan.cslt:  # pack W*M (and (W*M)^T for dX) in one pass over the master weight
            w = weight.detach()
            if pair is not None:  # the layer's persistent pair, already refreshed for this step
                packed, packed_t, pruned = pair
                if pruned is not None:
                    ctx.decay_from = (pruned, packed)
            elif plan.mode in _TRANSPOSABLE_MODES:
                packed, packed_t = pack_pair_operands(w, mask, dt)
            else:
                packed = pack_operand(w, mask, dt)
            # [T, out], or [out, T] (transposed back to a view below) for a column-major output
            y = cslt_mm_packed(packed, tuple(w.shape), x2d.t(), transpose_result=not plan.col_out, bias=bias)
            if plan.col_out:
                y = y.t()
        else:
            wm = torch.where(mask, weight.to(dt), 0.0)  # pruned weight, compute dtype
            if plan.col_out:
                yt = torch.addmm(bias.to(dt)[:, None], wm, x2d.t()) if bias is not None else wm @ x2d.t()
                y = yt.t()
            else:
                y = torch.addmm(bias.to(dt), x2d, wm.t()) if bias is not None else x2d @ wm.t()
        ctx.save_for_backward(x2d, wm, packed_t, weight, mask)
        ctx.seed = seed  # not saved: it is advanced in place on the device (by us, or a handoff)
        ctx.plan = plan
        ctx.handoff = handoff
        ctx.dt = dt
        ctx.x_col = not x2d.is_contiguous()
        ctx.x_shape = x.shape
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y.reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x2d, wm, packed_t, weight, mask = ctx.saved_tensors
        seed = ctx.seed
        plan: _Plan = ctx.plan
        out_f, in_f = weight.shape
        with _no_autocast(plan.device_type):
            dy2d = _as_2d(dy, out_f).to(ctx.dt)  # .to keeps the layout
            if plan.checks:
                check_tensor("grad_output", dy2d)
            dx = dw = db = None
            if ctx.needs_input_grad[0]:
                if packed_t is not None:  # (W*M)^T [in, out] is 2:4 along out, packed in the forward
                    dx = cslt_mm_packed(packed_t, (in_f, out_f), dy2d.t(), transpose_result=not ctx.x_col)
                    dx = dx.t() if ctx.x_col else dx  # dX in X's layout
                else:
                    if wm is None:
                        wm = torch.where(mask, weight.to(ctx.dt), 0.0)
                    dx = (wm.t() @ dy2d.t()).t() if ctx.x_col else dy2d @ wm
                dx = dx.reshape(ctx.x_shape)
            if ctx.needs_input_grad[1]:
                if plan.mode == "fst" and plan.mvue:
                    dw = _fst_weight_grad(dy2d, x2d, seed, plan, ctx.handoff)
                else:
                    dw = dy2d.t() @ x2d
                if plan.decay and not plan.checks and ctx.decay_from is not None and dw.is_contiguous():
                    # cast and decay in one pass, from the pruned entries the forward wrote
                    dw = cslt_decay_cast_pruned(dw, *ctx.decay_from, plan.decay)
                elif plan.decay and not plan.checks:  # cast to the master dtype and decay in one pass
                    dw = masked_decay_cast_nocheck(dw, weight.detach(), mask, plan.decay)
                else:
                    dw = dw.to(weight.dtype).contiguous()
                    if plan.decay:
                        masked_decay_(dw, weight.detach(), mask, plan.decay)
            if ctx.bias_dtype is not None and ctx.needs_input_grad[2]:
                db = dy2d.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
        return dx, dw, db, None, None, None, None, None


_SPARSE_STATE_KEYS = ("mode", "dense", "mask_stale", "have_prev", "mask", "flip_ref", "mvue_seed")


class SparseLinear(nn.Linear):
    """Drop-in ``nn.Linear`` whose GEMMs are 2:4 sparse as the ``mode`` prescribes.

    Same parameters, ``state_dict`` and initialisation as ``nn.Linear``; inputs of any leading
    shape ``[..., in_features]``; honours ``torch.autocast`` (weight and input are cast to the
    autocast dtype, the weight gradient comes back in the weight's dtype with the masked decay
    added there). Masks, flip statistics and the MVUE seed are non-persistent buffers (recomputed
    from the weights after ``load_state_dict``), so checkpoints interchange with ``nn.Linear``.

    ``checks`` (default True) validates inputs and gradients (finite values, MVUE range) at the
    cost of host syncs; pass False for timed or CUDA-graph-captured runs (a per-layer choice: no
    process-wide switch). ``use_cusparselt=False`` forces the dense fallback. ``mvue=False`` (fst
    only) computes dW exactly, dense, instead of through MVUE: Hu et al.'s Table 7 ablation.

    The masked decay is added to the gradient in every backward: with k micro-batches of
    gradient accumulation per optimizer step it counts k times (pass ``decay / k``).

    ``output_layout="col"`` makes the sparse forward write its output column-major (a transposed
    view of a contiguous [out, tokens] buffer; same values and shape). Fully sparse training
    wants that for the FFN's first linear (Hu et al. App. A.3): the activation runs over it
    element-wise, the second linear reads it as its GEMM operand without a copy, and in the
    backward the gradient arrives column-major too, so MVUE + packing of dY^T read rows instead
    of strided columns. Inputs may be row- or column-major; dX comes back in the input's layout.
    Dense mode and the dense phase return nn.Linear's row-major output.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        mode: str = "fst",
        *,
        mask_interval: int = 40,
        decay: float = 6e-5,
        dense_fraction: float = 1 / 6,
        track_flip: bool = True,
        checks: bool = True,
        seed: int | None = None,
        output_layout: str = "row",
        mvue: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        for name, v in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
            if v <= 0:
                raise ValueError(f"{name} must be positive, got {v}")
        if not isinstance(mode, str) or mode not in MODES:
            raise ValueError(
                f"unknown mode {mode!r}; valid modes: {', '.join(MODES)} (the 'half' baseline is a model-level choice)"
            )
        if mode != "dense":
            if in_features % 4:
                raise ValueError(
                    f"in_features={in_features} is not divisible by 4 (2:4 groups along in, mode={mode!r})"
                )
            if mode in _TRANSPOSABLE_MODES and out_features % 4:
                raise ValueError(
                    f"out_features={out_features} is not divisible by 4 (transposable 4x4 tiles, mode={mode!r})"
                )
        if isinstance(mask_interval, bool) or not isinstance(mask_interval, int):
            raise TypeError(f"mask_interval must be an int, got {type(mask_interval).__name__}")
        if mask_interval < 1:
            raise ValueError(f"mask_interval must be >= 1, got {mask_interval}")
        for name, v in (("decay", decay), ("dense_fraction", dense_fraction)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
        if not (math.isfinite(decay) and decay >= 0):
            raise ValueError(f"decay must be finite and >= 0, got {decay}")
        if not 0.0 <= dense_fraction <= 1.0:
            raise ValueError(f"dense_fraction must lie in [0, 1], got {dense_fraction}")
        for name, v in (("track_flip", track_flip), ("checks", checks), ("mvue", mvue)):
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be a bool, got {type(v).__name__}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
            raise ValueError(f"seed must be an int in [0, 2**63) or None, got {seed!r}")

        self._mask_stale = True
        # (device, compute dtype) -> packed (W*M, (W*M)^T) of fst/weight24 on cuSPARSELt: kept
        # across steps, values rewritten each forward, metadata only when the mask changes
        self._pairs: dict[tuple[str, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}
        # same keys -> the pruned entries of W in that dtype, rewritten with the values each
        # forward where the backward decays (masked decay and grad cast read them, not W and M)
        self._pruned: dict[tuple[str, torch.dtype], torch.Tensor] = {}
        # the last sparse forward's slot for a packed weight-gradient operand (GradHandoff)
        self.grad_handoff: GradHandoff | None = None
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        if mode != "dense" and self.weight.dtype not in FLOAT_DTYPES:
            names = ", ".join(_dtype_name(d) for d in FLOAT_DTYPES)
            raise TypeError(f"mode={mode!r} needs a weight dtype among {names}, got {_dtype_name(self.weight.dtype)}")
        self.mode = mode
        self.output_layout = output_layout
        self.mask_interval = mask_interval
        self.decay = float(decay)
        self.dense_fraction = float(dense_fraction)
        self.track_flip = track_flip
        self.checks = checks
        self.mvue = mvue
        self.use_cusparselt = True
        self._dense = False
        self._flip_count: torch.Tensor | None = None
        self._flip_value: float | None = None
        self._have_prev = False
        self._last_reason: object = _UNSET
        self._warned: set[str] = set()

        dev = self.weight.device
        sparse = mode != "dense"

        def bool_buf() -> torch.Tensor | None:
            return torch.zeros(out_features, in_features, dtype=torch.bool, device=dev) if sparse else None

        # _mask: the mask the forward reads (srste: the last forward's); _flip_ref: the mask that
        # flips are counted against (fst/weight24: last candidate; srste: last step's mask)
        self.register_buffer("_mask", bool_buf(), persistent=False)
        self.register_buffer("_flip_ref", bool_buf() if track_flip else None, persistent=False)
        seed_t = None
        if mode == "fst":
            seed_t = mvue24_seed_tensor(dev) if seed is None else torch.tensor([seed], dtype=torch.int64, device=dev)
        self.register_buffer("mvue_seed", seed_t, persistent=False)
        self.register_load_state_dict_post_hook(_after_load_state_dict)

    # ---------------------------------------------------------------------------------------
    # state
    # ---------------------------------------------------------------------------------------

    def reset_parameters(self) -> None:
        """nn.Linear's initialisation; the mask is recomputed from the new weights when next used."""
        super().reset_parameters()
        self._mask_stale = True

    def extra_repr(self) -> str:
        s = super().extra_repr() + f", mode={self.mode!r}"
        if self.mode != "dense":
            s += f", mask_interval={self.mask_interval}, decay={self.decay:g}, dense_fraction={self.dense_fraction:g}"
            if self.mode == "fst" and not self.mvue:
                s += ", mvue=False"
        return s

    @property
    def output_layout(self) -> str:
        """ "row" (nn.Linear's) or "col": the memory layout of the sparse forward's output."""
        return self._output_layout

    @output_layout.setter
    def output_layout(self, value: str) -> None:
        if not isinstance(value, str) or value not in OUTPUT_LAYOUTS:
            raise ValueError(f"output_layout must be one of {OUTPUT_LAYOUTS}, got {value!r}")
        self._output_layout = value

    @property
    def is_dense(self) -> bool:
        """True in mode "dense" and in the dense fine-tuning phase."""
        return self.mode == "dense" or self._dense

    @property
    def mask(self) -> torch.Tensor:
        """The bool mask in use (a copy, shape of weight; all True when dense). srste: the mask
        of the current weights, which the next forward uses."""
        if self.is_dense:
            return torch.ones(self.weight.shape, dtype=torch.bool, device=self.weight.device)
        with torch.no_grad():
            if self.mode == "srste":
                return nm24_mask(self.weight)
            self._ensure_mask()
            return self._mask.clone()

    @property
    def flip_rate(self) -> float | None:
        """Fraction of mask entries changed by the last optimizer step (None: not measured).

        Computed lazily: reading it syncs with the device once; not reading it costs no sync."""
        if self._flip_value is None and self._flip_count is not None:
            self._flip_value = float(self._flip_count.item()) / self.weight.numel()
        return self._flip_value

    @property
    def flip_rate_tensor(self) -> torch.Tensor | None:
        """``flip_rate`` as a 0-d float32 tensor on the weight's device, without a host sync."""
        if self._flip_count is None:
            return None
        return self._flip_count.to(torch.float32) / self.weight.numel()

    def sparse_state_dict(self) -> dict[str, object]:
        """The mask-schedule state that ``state_dict`` leaves out (to stay interchangeable with
        nn.Linear): mask in use, flip reference, MVUE seed, dense phase. Save it beside a
        checkpoint and restore it with :meth:`load_sparse_state_dict` for an exact resume."""

        def copy(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.detach().clone()

        return {
            "mode": self.mode,
            "dense": self._dense,
            "mask_stale": self._mask_stale,
            "have_prev": self._have_prev,
            "mask": copy(self._mask),
            "flip_ref": copy(self._flip_ref),
            "mvue_seed": copy(self.mvue_seed),
        }

    @torch.no_grad()
    def load_sparse_state_dict(self, state: dict[str, object]) -> None:
        """Restore :meth:`sparse_state_dict` (after ``load_state_dict``); buffers are written in
        place, so a captured graph sees them."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from sparse_state_dict(), got {type(state).__name__}")
        missing = [k for k in _SPARSE_STATE_KEYS if k not in state]
        if missing:
            raise ValueError(
                f"state for {type(self).__name__}({self.extra_repr()}) is missing key(s) {missing}; "
                f"sparse_state_dict() gives {list(_SPARSE_STATE_KEYS)}"
            )
        if state.get("mode") != self.mode:
            raise ValueError(f"state is for mode={state.get('mode')!r}, this layer has mode={self.mode!r}")
        for name, buf in (("mask", self._mask), ("flip_ref", self._flip_ref), ("mvue_seed", self.mvue_seed)):
            val = state.get(name)
            if (buf is None) != (val is None):
                raise ValueError(f"state has {name}={'None' if val is None else 'a tensor'}, this layer does not")
            if buf is not None:
                if not isinstance(val, torch.Tensor) or val.shape != buf.shape or val.dtype != buf.dtype:
                    raise ValueError(f"state[{name!r}] must be a {buf.dtype} tensor of shape {tuple(buf.shape)}")
                buf.copy_(val)
        self._dense = bool(state["dense"])
        self._mask_stale = bool(state["mask_stale"])
        self._have_prev = bool(state["have_prev"])
        self._flip_count, self._flip_value = None, None
        self._repack_pairs()

    @property
    def fallback_reason(self) -> str | None:
        """Why the sparse GEMMs run as dense matmuls (last forward; before one, as far as known), or None."""
        if self.mode == "dense":
            return "mode='dense' (no sparse GEMMs)"
        if self._dense:
            return "dense fine-tuning phase (no sparse GEMMs)"
        if self._last_reason is not _UNSET:
            return self._last_reason  # type: ignore[return-value]
        dt = self.weight.dtype
        if self.weight.is_cuda and _autocast_enabled("cuda"):
            dt = torch.get_autocast_dtype("cuda")
        return self._gemm_refusal(dt, 64, self.weight.device)

    @property
    def backend(self) -> str:
        """ "cusparselt" when the mode's 2:4 GEMMs run on cuSPARSELt, else "dense"."""
        return "dense" if self.fallback_reason else "cusparselt"

    def _checks(self) -> bool:
        return self.checks

    @torch.no_grad()
    def refresh_mask(self) -> None:
        """Recompute the mask from the current weights now (in place: a captured graph sees it)."""
        if self.mode == "dense":
            return
        w = self.weight.detach()
        if self.mode == "srste":
            m = nm24_mask(w)
        else:
            m = transposable_mask(w, method="exhaustive", check_finite=self._checks())
        self._mask.copy_(m)
        if self._flip_ref is not None and self.mode != "srste":
            self._flip_ref.copy_(m)
        self._have_prev = False
        self._mask_stale = False
        self._repack_pairs()

    @torch.no_grad()
    def _repack_pairs(self) -> None:
        """The mask changed: repack the persistent pairs (values and metadata) in place, so a
        captured graph sees the new mask; pairs left on another device are dropped."""
        w = self.weight.detach()
        self._pairs = {
            key: refresh_pair_operands(w, self._mask, pair, values_only=False)
            for key, pair in self._pairs.items()
            if key[0] == str(w.device)
        }
        # pruned entries: rewritten by the next forward's values refresh, before any backward
        self._pruned = {key: t for key, t in self._pruned.items() if key in self._pairs}

    @torch.no_grad()
    def _packed_pair(self, dt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's packed (W*M, (W*M)^T) in ``dt``: packed afresh on first use, else the kept
        values rewritten in place from the current weight (the mask is unchanged since the last
        repack)."""
        w = self.weight.detach()
        key = (str(w.device), dt)
        pair = self._pairs.get(key)
        pruned = self._pruned.get(key)
        if (
            pruned is None
            and self.decay
            and w.dtype == torch.float32
            and w.shape[0] % 64 == 0
            and w.shape[1] % 64 == 0
            and _sparse_gemm.layout_matches(w.device, dt)
        ):
            pruned = self._pruned[key] = torch.empty(w.shape[0], w.shape[1] // 2, dtype=dt, device=w.device)
        if pair is None:
            pair = pack_pair_operands(w, self._mask, dt)
            if pruned is not None:  # the pruned entries come with a values refresh
                pair = refresh_pair_operands(w, self._mask, pair, values_only=True, pruned=pruned)
        else:
            pair = refresh_pair_operands(w, self._mask, pair, values_only=True, pruned=pruned)
        self._pairs[key] = pair
        return pair

    def _pruned_entries(self, dt: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """The pruned entries that this step's values refresh wrote (None: the decay reads W)."""
        return self._pruned.get((str(device), dt))

    def _ensure_mask(self) -> None:
        if self._mask_stale:
            self.refresh_mask()

    def set_dense(self, dense: bool) -> None:
        """Switch to dense GEMMs (True) or back to sparse (False, mask recomputed from the weights).

        Changes the computation: re-capture any CUDA graph that contains this layer."""
        if not isinstance(dense, bool):
            raise TypeError(f"dense must be a bool, got {type(dense).__name__}")
        if self.mode == "dense":
            if not dense:
                raise ValueError("mode='dense' has no sparse phase; construct the layer with a sparse mode")
            return
        if dense == self._dense:
            return
        self._dense = dense
        self._flip_count, self._flip_value = None, None
        self._pairs, self._pruned = {}, {}  # memory back; a sparse phase packs afresh
        if not dense:
            self.refresh_mask()

    @torch.no_grad()
    def after_optimizer_step(self, step: int, total_steps: int) -> None:
        """Mask schedule; call after every ``optimizer.step()`` with ``step`` = optimizer steps
        completed so far (1 after the first). Runs outside any CUDA graph (it may sync)."""
        for name, v in (("step", step), ("total_steps", total_steps)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if step < 0 or total_steps < 1:
            raise ValueError(f"need step >= 0 and total_steps >= 1, got step={step}, total_steps={total_steps}")
        self._flip_count, self._flip_value = None, None
        if self.is_dense:
            return
        if self.mode == "srste":
            if self._flip_ref is not None:
                self._ensure_mask()  # no forward yet: the current weights' mask
                if self._have_prev:
                    self._flip_count = torch.count_nonzero(self._mask != self._flip_ref)
                self._flip_ref.copy_(self._mask)
                self._have_prev = True
            return
        if self.dense_fraction > 0 and step >= (1.0 - self.dense_fraction) * total_steps - 1e-9:
            self.set_dense(True)
            return
        self._ensure_mask()
        refresh = step % self.mask_interval == 0
        if not (refresh or self._flip_ref is not None):
            return
        cand = transposable_mask(self.weight.detach(), method="exhaustive", check_finite=self._checks())
        if self._flip_ref is not None:
            self._flip_count = torch.count_nonzero(cand != self._flip_ref)
            self._flip_ref.copy_(cand)
        if refresh:
            self._mask.copy_(cand)
            self._repack_pairs()

    # ---------------------------------------------------------------------------------------
    # forward
    # ---------------------------------------------------------------------------------------

    def _gemm_refusal(self, dt: torch.dtype, tokens: int, device: torch.device) -> str | None:
        """Why cuSPARSELt cannot run all of this mode's 2:4 GEMMs for this call, or None."""
        if not self.use_cusparselt:
            return "use_cusparselt is False"
        o, i = self.out_features, self.in_features
        problems = [(o, i, tokens)]  # forward: (W*M) [out, in] @ X^T [in, T]
        if self.mode in _TRANSPOSABLE_MODES:
            problems.append((i, o, tokens))  # dX: (W*M)^T [in, out] @ dY^T [out, T]
        if self.mode == "fst" and self.mvue:
            problems.append((o, tokens, i))  # dW: MVUE(dY^T) [out, T] @ X [T, in]
        for rows, cols, n in problems:
            reason = cslt_refusal(rows, cols, n, dt, device)
            if reason is not None:
                return reason
        return None

    def _note_backend(self, reason: str | None) -> None:
        self._last_reason = reason
        if reason is not None and reason not in self._warned:
            self._warned.add(reason)
            warnings.warn(
                f"SparseLinear(mode={self.mode!r}) uses a dense fallback for its 2:4 GEMMs (same math): {reason}",
                stacklevel=2,
            )

    def check_input(self, x: object) -> None:
        """TypeError unless ``x`` is a tensor, ValueError unless its last dimension is in_features."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"input must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"input has shape {tuple(x.shape)}: its last dimension must be in_features={self.in_features}"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.check_input(x)
        if torch.compiler.is_compiling():
            return self._forward_compiled(x)
        checks = self._checks()
        if checks:
            check_tensor("input", x, dtypes=FLOAT_DTYPES if self.mode != "dense" else (*FLOAT_DTYPES, torch.float64))
        self.grad_handoff = None
        if self.is_dense:
            return F.linear(x, self.weight, self.bias)
        dev = x.device.type
        if _autocast_enabled(dev) and x.is_floating_point():
            dt = torch.get_autocast_dtype(dev)
            x = x.to(dt)
        else:
            dt = x.dtype
            if dt != self.weight.dtype:
                raise TypeError(
                    f"input dtype {_dtype_name(dt)} != weight dtype {_dtype_name(self.weight.dtype)} "
                    "(cast one of them, or run under torch.autocast)"
                )
        if dt not in FLOAT_DTYPES:
            raise TypeError(f"compute dtype {_dtype_name(dt)} is not supported; use float32, float16 or bfloat16")
        if x.device != self.weight.device:
            raise ValueError(f"input is on {x.device} but the weight is on {self.weight.device}")
        if checks:
            check_tensor("weight", self.weight.detach())
        reason = self._gemm_refusal(dt, x.numel() // self.in_features, x.device)
        self._note_backend(reason)
        with torch.no_grad():
            if self.mode == "srste":
                mask = nm24_mask(self.weight)
                if self._flip_ref is not None:
                    self._mask.copy_(mask)
                    self._mask_stale = False
            else:
                self._ensure_mask()
                mask = self._mask
            pair = None
            if reason is None and self.mode in _TRANSPOSABLE_MODES:
                pair = (*self._packed_pair(dt), self._pruned_entries(dt, x.device))
        plan = _Plan(self.mode, self.decay, reason is None, checks, dev, self._output_layout == "col", self.mvue)
        self.grad_handoff = handoff = GradHandoff(plan, self.mvue_seed)
        with _no_autocast(dev):
            return _SparseLinearFn.apply(x, self.weight, self.bias, mask, self.mvue_seed, plan, pair, handoff)

    def _forward_compiled(self, x: torch.Tensor, act: tuple[str, str] | None = None) -> torch.Tensor:
        """The forward as ``torch.compile`` traces it: the same math through the custom ops of
        :mod:`kernels.ops.compile_ops` (no graph break inside the layer). No value scans
        (``checks`` applies to eager calls only), no warning about a dense fallback (``backend``
        still says which one runs), a row-major output and no hand-off of the weight-gradient
        operand (the compiled step packs it itself; the activations do not look for one when
        compiled). fst/weight24 on cuSPARSELt keep the eager layer's packed pair across steps
        (:meth:`_compiled_pair`): values rewritten in place each forward, metadata only when the
        mask changes. ``act`` = (kind, approximate): return the activation of the output instead,
        through ``compile_ops.linear_act`` (fst with MVUE: the activation backward fused with the
        weight-gradient pack; :func:`kernels.layers.sparse_activation.fst_act`, which passes it
        only for a sparse layer)."""
        if self.is_dense:
            if act is not None:
                raise RuntimeError("a dense-phase layer has no fused activation: call the layer, then the activation")
            return F.linear(x, self.weight, self.bias)
        dev = x.device.type
        if _autocast_enabled(dev) and x.is_floating_point():
            x = x.to(torch.get_autocast_dtype(dev))
        elif x.dtype != self.weight.dtype:
            raise TypeError(
                f"input dtype {_dtype_name(x.dtype)} != weight dtype {_dtype_name(self.weight.dtype)} "
                "(cast one of them, or run under torch.autocast)"
            )
        if x.dtype not in FLOAT_DTYPES:
            raise TypeError(f"compute dtype {_dtype_name(x.dtype)} is not supported; use float32, float16 or bfloat16")
        reason = self._gemm_refusal(x.dtype, x.numel() // self.in_features, x.device)
        self._last_reason = reason
        cslt = reason is None
        w = self.weight.detach()
        draws = self.mvue_seed is not None and self.mvue and torch.is_grad_enabled() and self.weight.requires_grad
        packed = packed_t = pruned = None
        with torch.no_grad():
            if self.mode == "srste":
                mask = compile_ops.nm24_mask(w)
                if self._flip_ref is not None:
                    self._mask.copy_(mask)
            else:
                if self._mask_stale:  # as refresh_mask(), pairs repacked in place included
                    self._mask.copy_(compile_ops.transposable_mask(w))
                    if self._flip_ref is not None:
                        self._flip_ref.copy_(self._mask)
                    self._have_prev = False
                    self._repack_pairs_compiled(w)
                mask = self._mask
                if cslt and _pair_layout_ok(x.device, x.dtype):
                    packed, packed_t, pruned = self._compiled_pair(w, x.dtype)
            self._mask_stale = False
            if draws:  # the backward draws with this value; the buffer advances as eagerly
                seed = compile_ops.take_seed(self.mvue_seed)
            else:
                seed = self.mvue_seed if self.mvue_seed is not None else _NO_SEED.to(x.device)
        args = (x.reshape(-1, self.in_features), self.weight, self.bias, mask, seed, self.mode, self.decay)
        args = (*args, self.mvue, cslt, packed, packed_t, pruned)
        if act is not None:
            a = compile_ops.linear_act(*args, *act)[0]
            return a.view(*x.shape[:-1], a.shape[-1])
        return compile_ops.linear(*args).view(*x.shape[:-1], self.out_features)

    def _repack_pairs_compiled(self, w: torch.Tensor) -> None:
        """:meth:`_repack_pairs` as the compiled forward traces it (the mask changed inside the
        graph): every kept pair on this device repacked in place, values and metadata."""
        dev = str(w.device)
        for key, pair in self._pairs.items():
            if key[0] == dev:
                compile_ops.repack_pair(w, self._mask, pair[0], pair[1], None, False)

    def _compiled_pair(
        self, w: torch.Tensor, dt: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """:meth:`_packed_pair` for the compiled forward: this step's packed (W*M, (W*M)^T) in
        ``dt`` and the pruned entries (None where the backward decays from W), in the layer's
        persistent buffers (``_pairs``, ``_pruned``, shared with the eager path). Only the values
        are rewritten (``repack_pair``, in place); the metadata were written when the pair was
        made or last repacked after a mask change (``_repack_pairs``, eagerly, or the compiled
        forward's own refresh of a stale mask). A pair made here is a new tensor stored on the
        layer: the next call traces again once, with the pair as an input."""
        key = (str(w.device), dt)
        r, c = w.shape
        pair = self._pairs.get(key)
        if pair is None:
            (pr, pc), (tr, tc) = compile_ops.pair_shapes(r, c)
            pair = (w.new_zeros(pr, pc, dtype=dt), w.new_zeros(tr, tc, dtype=dt))
            compile_ops.repack_pair(w, self._mask, pair[0], pair[1], None, False)
            self._pairs[key] = pair
        pruned = self._pruned.get(key)
        if pruned is None and self.decay and w.dtype == torch.float32 and r % 64 == 0 and c % 64 == 0:
            pruned = w.new_empty(r, c // 2, dtype=dt)
            self._pruned[key] = pruned
        compile_ops.repack_pair(w, self._mask, pair[0], pair[1], pruned, True)
        return pair[0], pair[1], pruned


@torch.compiler.assume_constant_result
def _pair_layout_ok(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether our packer writes cuSPARSELt's layout here (``layout_matches``): then the compiled
    forward keeps a persistent pair (its buffer shapes are our packer's); a constant to the
    compiler, taken when it traces."""
    return bool(_sparse_gemm.layout_matches(device, dtype))


_NO_SEED = torch.zeros(1, dtype=torch.int64)


def _after_load_state_dict(module: nn.Module, incompatible_keys: object) -> None:
    """New weights: recompute the mask now (into the same buffer, so a captured graph sees it)."""
    if isinstance(module, SparseLinear) and not module.is_dense:
        module.refresh_mask()


__all__ = ["MODES", "OUTPUT_LAYOUTS", "GradHandoff", "SparseLinear"]
