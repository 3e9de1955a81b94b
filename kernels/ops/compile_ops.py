"""PyTorch custom ops (``torch.ops.sparse24.*``) for the kernels that ``SparseLinear`` and the
gated activations run, so that ``torch.compile(model)`` traces a sparse model whole.

Why: ``torch.compile`` cannot see through our Triton launchers, cuSPARSELt handles and
autograd Functions that hold Python state; before these ops, compiling a model with
``SparseLinear(mode="fst")`` failed (a graph break inside the layer, or an Inductor lowering
error on the bool mask). Each op here is a ``torch.library.custom_op`` with a fake (meta)
implementation, so the compiler knows its output shapes without running it, and the two
differentiable ones (``linear``, ``gated``) register their backward with
``torch.library.register_autograd``. Inside an op the same kernels run as in eager mode
(Triton and cuSPARSELt where they apply, the plain-PyTorch fallback elsewhere).

The MVUE seed is read from a snapshot the forward took (the layer advances its own seed buffer
in the forward). fst/weight24 on cuSPARSELt with our packer keep the eager layer's persistent
packed pair (W*M, (W*M)^T) and pruned entries: ``repack_pair`` rewrites those buffers in place
(values only on a step without a mask change, values and metadata after one), and ``linear``
takes them as inputs (the forward reads W*M, the backward (W*M)^T and, for the masked decay, the
pruned entries) instead of packing. Elsewhere ``linear`` packs per call. Eager mode keeps its
own, faster-to-launch path (custom-op dispatch costs host time, and the eager fst step is
host-bound: docs/methods.md).
"""

import torch
import torch.nn.functional as F

from kernels.ops.common import no_autocast, use_triton
from kernels.ops.cslt_pack import (
    cslt_decay_cast_pruned,
    cslt_gated_backward_mvue_pack_t,
    cslt_gelu_backward_mvue_pack_t,
    gated_act,
    gated_backward_reference,
    layout_matches,
    packed_alloc,
)
from kernels.ops.masked_decay import masked_decay_cast_nocheck
from kernels.ops.mvue import mvue24_nocheck
from kernels.ops.nm_mask import nm24_mask as _nm24_mask
from kernels.ops.sparse_gemm import (
    cslt_mm_packed,
    cslt_sparse_mm,
    pack_mvue_t_operand,
    pack_operand,
    pack_pair_operands,
    refresh_pair_operands,
)
from kernels.ops.transposable import transposable_mask as _transposable_mask_entry

NAMESPACE = "sparse24"
TRANSPOSABLE_MODES = ("fst", "weight24")


# ---------------------------------------------------------------------------------------------
# masks
# ---------------------------------------------------------------------------------------------


@torch.library.custom_op(f"{NAMESPACE}::transposable_mask", mutates_args=())
def transposable_mask(w: torch.Tensor) -> torch.Tensor:
    """Optimal transposable 2:4 mask of ``w`` (exhaustive search, no finiteness scan)."""
    return _transposable_mask_entry(w, method="exhaustive", check_finite=False)


@transposable_mask.register_fake
def _(w: torch.Tensor) -> torch.Tensor:
    return torch.empty(w.shape, dtype=torch.bool, device=w.device)


@torch.library.custom_op(f"{NAMESPACE}::nm24_mask", mutates_args=())
def nm24_mask(w: torch.Tensor) -> torch.Tensor:
    """2 largest |w| of every 4 along dim 1, ties to the lower index (SR-STE's per-forward mask)."""
    return _nm24_mask(w)


@nm24_mask.register_fake
def _(w: torch.Tensor) -> torch.Tensor:
    return torch.empty(w.shape, dtype=torch.bool, device=w.device)


@torch.library.custom_op(f"{NAMESPACE}::take_seed", mutates_args=("seed",))
def take_seed(seed: torch.Tensor) -> torch.Tensor:
    """The MVUE seed's current value (a new tensor), and ``seed`` advanced by one in place: what
    one eager backward draws with and leaves behind. One opaque op, because a ``clone`` followed by
    an in-place ``add_`` on a buffer was seen compiled (Inductor, torch 2.13 CPU) to hand the
    backward the advanced value."""
    old = seed.clone()
    seed.add_(1)
    return old


@take_seed.register_fake
def _(seed: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(seed)


# ---------------------------------------------------------------------------------------------
# the persistent packed pair of a transposable layer
# ---------------------------------------------------------------------------------------------


def pair_shapes(r: int, c: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Shapes of the packed W*M [r, c] and (W*M)^T [c, r] buffers (what our packer and
    ``torch._cslt_compress`` return where the layouts match)."""
    return (r, packed_alloc(r, c) // r), (c, packed_alloc(c, r) // c)


@torch.library.custom_op(f"{NAMESPACE}::repack_pair", mutates_args=("packed", "packed_t", "pruned"))
def repack_pair(
    w: torch.Tensor,
    mask: torch.Tensor,
    packed: torch.Tensor,
    packed_t: torch.Tensor,
    pruned: torch.Tensor | None,
    values_only: bool,
) -> None:
    """Bring the packed pair (``packed`` = pack(W*M), ``packed_t`` = pack((W*M)^T), from our
    packer) up to date with ``w``, in place (:func:`kernels.ops.sparse_gemm.refresh_pair_operands`):
    ``values_only=True`` rewrites only the kept values (the pair holds ``mask`` already) and, where
    ``pruned`` is given, the pruned entries; ``False`` repacks values and metadata (``pruned`` is
    left alone; the next values-only refresh writes it). The buffers keep their storage, so a
    CUDA graph that holds them sees the update."""
    with torch.no_grad():
        w = w.detach()
        got = refresh_pair_operands(
            w, mask, (packed, packed_t), values_only=values_only, pruned=pruned if values_only else None
        )
        if got[0] is not packed or got[1] is not packed_t:  # torch's layout changed size: cannot be in place
            raise RuntimeError("repack_pair: the packed pair could not be refreshed in place")


@repack_pair.register_fake
def _(w, mask, packed, packed_t, pruned, values_only) -> None:
    return None


# ---------------------------------------------------------------------------------------------
# SparseLinear: Y = X (W*M)^T + b and its backward
# ---------------------------------------------------------------------------------------------


@torch.library.custom_op(f"{NAMESPACE}::linear", mutates_args=())
def linear(
    x2d: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    mask: torch.Tensor,
    seed: torch.Tensor,
    mode: str,
    decay: float,
    mvue: bool,
    cslt: bool,
    packed: torch.Tensor | None = None,
    packed_t: torch.Tensor | None = None,
    pruned: torch.Tensor | None = None,
) -> torch.Tensor:
    """Y [T, out] = X (W*M)^T + b in X's dtype (the master weight is cast here), row-major.

    ``seed`` (int64, one element) is the MVUE seed snapshot the backward draws with; ``mode``,
    ``decay``, ``mvue`` say what the backward does; ``cslt``: the 2:4 GEMMs run on cuSPARSELt
    (the caller checked that it accepts every problem), else as dense matmuls of the pruned
    operand. ``packed``, ``packed_t`` (cslt, fst/weight24): this step's packed W*M and (W*M)^T
    (the layer's persistent pair, refreshed by :func:`repack_pair`), read instead of packing
    the weight here and in the backward; ``pruned``: the pruned entries that refresh wrote, from
    which the backward decays (as the eager layer does), else it decays from W and M."""
    return _linear_forward(x2d, weight, bias, mask, cslt, packed)


def _linear_forward(x2d, weight, bias, mask, cslt, packed) -> torch.Tensor:
    dt = x2d.dtype
    with no_autocast(x2d.device.type):
        w = weight.detach()
        if cslt:
            if packed is None:
                packed = pack_operand(w, mask, dt)
            return cslt_mm_packed(packed, tuple(w.shape), x2d.t(), transpose_result=True, bias=bias)
        wm = torch.where(mask, w.to(dt), 0.0)
        return torch.addmm(bias.to(dt), x2d, wm.t()) if bias is not None else x2d @ wm.t()


@linear.register_fake
def _(x2d, weight, bias, mask, seed, mode, decay, mvue, cslt, packed=None, packed_t=None, pruned=None):
    return x2d.new_empty(x2d.shape[0], weight.shape[0])


def _fst_weight_grad(dy: torch.Tensor, x2d: torch.Tensor, seed: torch.Tensor, cslt: bool) -> torch.Tensor:
    """dW = MVUE(dY^T along tokens) @ X, drawing with (a copy of) ``seed``: bit for bit what the
    eager layer computes from the same seed value."""
    s = seed.clone()  # the op is functional: the layer's own seed buffer was advanced in the forward
    t, out_f = dy.shape
    if cslt:  # T % 64 == 0 here (the caller's refusal check)
        packed = pack_mvue_t_operand(dy, s)
        if packed is not None:
            return cslt_mm_packed(packed, (out_f, t), x2d, transpose_result=False)
        return cslt_sparse_mm(mvue24_nocheck(dy.t().contiguous(), -1, seed_tensor=s), x2d, transpose_result=False)
    pad = (-t) % 4
    dyt = dy.t().contiguous()
    if pad:  # zero tokens contribute nothing and keep the estimator unbiased
        dyt = F.pad(dyt, (0, pad))
    g = mvue24_nocheck(dyt, -1, seed_tensor=s)
    return (g[:, :t] if pad else g) @ x2d


@torch.library.custom_op(f"{NAMESPACE}::linear_backward", mutates_args=())
def linear_backward(
    dy: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor,
    mask: torch.Tensor,
    seed: torch.Tensor,
    mode: str,
    decay: float,
    mvue: bool,
    cslt: bool,
    need_dx: bool,
    need_dw: bool,
    packed: torch.Tensor | None = None,
    packed_t: torch.Tensor | None = None,
    pruned: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dX [T, in] in X's dtype, dW in the weight's dtype with the masked decay added); an empty
    tensor stands for a gradient not asked for. fst: dX = dY (W*M) on the 2:4 (W*M)^T and
    dW = MVUE(dY^T) X; weight24: dX sparse, dW dense; srste: both dense (straight-through).
    ``packed_t``: the forward's packed (W*M)^T (else packed here); ``pruned`` with ``packed``: the
    masked decay and the cast read the pruned entries and the metadata (eager's
    ``cslt_decay_cast_pruned``) instead of W and M."""
    with no_autocast(x2d.device.type):
        return _linear_grads(
            dy, x2d, weight, mask, seed, mode, decay, mvue, cslt, need_dx, need_dw, packed, packed_t, pruned
        )


def _linear_grads(
    dy, x2d, weight, mask, seed, mode, decay, mvue, cslt, need_dx, need_dw, packed, packed_t, pruned, dw_raw=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`linear_backward`'s body; ``dw_raw``: the weight gradient before decay and cast, where
    the caller computed it (:func:`linear_act_backward`'s fused pack), else computed here."""
    dt = x2d.dtype
    out_f, in_f = weight.shape
    w = weight.detach()
    dy = dy.to(dt)
    dx = dw = dy.new_empty(0)
    if need_dx:
        if cslt and mode in TRANSPOSABLE_MODES:  # (W*M)^T [in, out] is 2:4 along out
            if packed_t is None:
                packed_t = pack_pair_operands(w, mask, dt)[1]
            dx = cslt_mm_packed(packed_t, (in_f, out_f), dy.t(), transpose_result=True)
        else:
            dx = dy @ torch.where(mask, w.to(dt), 0.0)
    if need_dw:
        if dw_raw is not None:
            dw = dw_raw
        else:
            dw = _fst_weight_grad(dy, x2d, seed, cslt) if mode == "fst" and mvue else dy.t() @ x2d
        # cast to the master dtype (and decay, in the same pass)
        if decay and pruned is not None and packed is not None and dw.is_contiguous():
            dw = cslt_decay_cast_pruned(dw, pruned, packed, decay)  # from the pruned entries
        elif decay:
            dw = masked_decay_cast_nocheck(dw, w, mask, decay)
        else:
            dw = dw.to(weight.dtype).contiguous()
    return dx, dw


@linear_backward.register_fake
def _(dy, x2d, weight, mask, seed, mode, decay, mvue, cslt, need_dx, need_dw, packed=None, packed_t=None, pruned=None):
    dx = x2d.new_empty(x2d.shape) if need_dx else x2d.new_empty(0)
    dw = weight.new_empty(weight.shape) if need_dw else x2d.new_empty(0)
    return dx, dw


def _linear_setup_context(ctx, inputs, output) -> None:
    x2d, weight, bias, mask, seed, mode, decay, mvue, cslt, packed, packed_t, pruned = inputs
    # the persistent buffers are saved as they are now: nothing rewrites them before the backward
    # (the next values refresh runs in the next forward, the next repack after the optimizer step)
    ctx.save_for_backward(x2d, weight, mask, seed, packed, packed_t, pruned)
    ctx.args = (mode, decay, mvue, cslt)
    ctx.bias_dtype = None if bias is None else bias.dtype


def _linear_backward(ctx, dy):
    x2d, weight, mask, seed, packed, packed_t, pruned = ctx.saved_tensors
    need_dx, need_dw, need_db = ctx.needs_input_grad[:3]
    dx, dw = linear_backward(dy, x2d, weight, mask, seed, *ctx.args, need_dx, need_dw, packed, packed_t, pruned)
    db = dy.sum(0, dtype=torch.float32).to(ctx.bias_dtype) if need_db and ctx.bias_dtype is not None else None
    return (dx if need_dx else None), (dw if need_dw else None), db, *([None] * 9)


linear.register_autograd(_linear_backward, setup_context=_linear_setup_context)


# ---------------------------------------------------------------------------------------------
# an fst layer and the activation after it: the activation backward fused with the MVUE pack
# ---------------------------------------------------------------------------------------------


def _act_forward(z: torch.Tensor, act: str, approximate: str) -> torch.Tensor:
    if act == "gelu":
        return F.gelu(z, approximate=approximate)
    from kernels.ops.geglu import geglu, swiglu

    z = z.contiguous()
    return geglu(z, approximate, check_finite=False) if act == "geglu" else swiglu(z, check_finite=False)


def _act_backward(z: torch.Tensor, g: torch.Tensor, act: str, approximate: str) -> torch.Tensor:
    if act == "gelu":
        return torch.ops.aten.gelu_backward(g, z, approximate=approximate)
    return gated_backward(z, g, act, approximate)


def act_pack_fuses(z: torch.Tensor, act: str) -> bool:
    """Whether the activation backward and the pack of MVUE(dz^T) run as one kernel on ``z``
    [T, n] (row-major, the fst layer's output): Triton runs, 16-bit, our packing layout holds on
    the device, T % 64 == 0 and n % 32 (GELU) or n / 2 % 64 (gated) == 0, as eager's hand-off."""
    t, n = z.shape
    width_ok = n % 32 == 0 if act == "gelu" else n % 128 == 0
    return (
        use_triton(z)
        and z.dtype in (torch.float16, torch.bfloat16)
        and t % 64 == 0
        and width_ok
        and layout_matches(z.device, z.dtype)
    )


@torch.library.custom_op(f"{NAMESPACE}::linear_act", mutates_args=())
def linear_act(
    x2d: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    mask: torch.Tensor,
    seed: torch.Tensor,
    mode: str,
    decay: float,
    mvue: bool,
    cslt: bool,
    packed: torch.Tensor | None,
    packed_t: torch.Tensor | None,
    pruned: torch.Tensor | None,
    act: str,
    approximate: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(act(Z), Z) with Z = :func:`linear` of the same arguments and ``act`` "gelu", "geglu" or
    "swiglu" (gated: on Z = [gate, up]). Why one op: the compiled fst FFN then runs the
    activation backward fused with the pack of fc's weight-gradient operand MVUE(dZ^T)
    (:func:`linear_act_backward`), as the eager layers' hand-off does, instead of writing dZ and
    reading it back to pack (H100, GPT-2 774M N=23: 19.9 ms activation + 9.7 ms MVUE pack compiled
    against 18.9 ms fused eager). Z is returned for the backward only (not differentiable)."""
    z = _linear_forward(x2d, weight, bias, mask, cslt, packed)
    with no_autocast(x2d.device.type), torch.no_grad():
        return _act_forward(z, act, approximate).contiguous(), z


@linear_act.register_fake
def _(x2d, weight, bias, mask, seed, mode, decay, mvue, cslt, packed, packed_t, pruned, act, approximate):
    n = weight.shape[0]
    z = x2d.new_empty(x2d.shape[0], n)
    return x2d.new_empty(x2d.shape[0], n if act == "gelu" else n // 2), z


@torch.library.custom_op(f"{NAMESPACE}::linear_act_backward", mutates_args=())
def linear_act_backward(
    g: torch.Tensor,
    z: torch.Tensor,
    x2d: torch.Tensor,
    weight: torch.Tensor,
    mask: torch.Tensor,
    seed: torch.Tensor,
    mode: str,
    decay: float,
    mvue: bool,
    cslt: bool,
    act: str,
    approximate: str,
    need_dx: bool,
    need_dw: bool,
    need_db: bool,
    packed: torch.Tensor | None = None,
    packed_t: torch.Tensor | None = None,
    pruned: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dX, dW, db float32) of :func:`linear_act` for the activation's output gradient ``g``
    (empty where not asked for). fst with MVUE on cuSPARSELt where :func:`act_pack_fuses`: dZ and
    the packed MVUE(dZ^T) in one kernel (``cslt_gelu_backward_mvue_pack_t`` /
    ``cslt_gated_backward_mvue_pack_t``, the same uniforms as the unfused pack from the same
    seed), dW from that operand; else the activation backward, then :func:`linear_backward`'s."""
    dt = x2d.dtype
    with no_autocast(x2d.device.type):
        z = z.contiguous()
        g = g.to(z.dtype).contiguous()
        dw_raw = None
        if need_dw and cslt and mode == "fst" and mvue and act_pack_fuses(z, act):
            s = seed.clone()  # functional: the layer's own seed buffer advanced in the forward
            if act == "gelu":
                dz, operand = cslt_gelu_backward_mvue_pack_t(z, g, s, approximate)
            else:
                dz, operand = cslt_gated_backward_mvue_pack_t(z, g, s, act, approximate)
            dw_raw = cslt_mm_packed(operand, (weight.shape[0], z.shape[0]), x2d, transpose_result=False)
        else:
            dz = _act_backward(z, g, act, approximate).to(dt)
        dx, dw = _linear_grads(
            dz, x2d, weight, mask, seed, mode, decay, mvue, cslt, need_dx, need_dw, packed, packed_t, pruned, dw_raw
        )
        db = dz.sum(0, dtype=torch.float32) if need_db else dz.new_empty(0, dtype=torch.float32)
    return dx, dw, db


@linear_act_backward.register_fake
def _(g, z, x2d, weight, mask, seed, mode, decay, mvue, cslt, act, approximate, need_dx, need_dw, need_db, *rest):
    dx = x2d.new_empty(x2d.shape) if need_dx else x2d.new_empty(0)
    dw = weight.new_empty(weight.shape) if need_dw else x2d.new_empty(0)
    db = x2d.new_empty(weight.shape[0], dtype=torch.float32) if need_db else x2d.new_empty(0, dtype=torch.float32)
    return dx, dw, db


def _linear_act_setup_context(ctx, inputs, output) -> None:
    x2d, weight, bias, mask, seed, mode, decay, mvue, cslt, packed, packed_t, pruned, act, approximate = inputs
    z = output[1]
    ctx.mark_non_differentiable(z)
    ctx.set_materialize_grads(False)  # no zeros for Z's (absent) gradient
    ctx.save_for_backward(x2d, weight, mask, seed, packed, packed_t, pruned, z)
    ctx.args = (mode, decay, mvue, cslt, act, approximate)
    ctx.bias_dtype = None if bias is None else bias.dtype


def _linear_act_backward(ctx, g, _gz):
    x2d, weight, mask, seed, packed, packed_t, pruned, z = ctx.saved_tensors
    need_dx, need_dw, need_db = ctx.needs_input_grad[:3]
    need_db = need_db and ctx.bias_dtype is not None
    if g is None:  # act(Z) took no part in the loss
        return (None,) * 14
    dx, dw, db = linear_act_backward(
        g, z, x2d, weight, mask, seed, *ctx.args, need_dx, need_dw, need_db, packed, packed_t, pruned
    )
    return (
        dx if need_dx else None,
        dw if need_dw else None,
        db.to(ctx.bias_dtype) if need_db else None,
        *([None] * 11),
    )


linear_act.register_autograd(_linear_act_backward, setup_context=_linear_act_setup_context)


# ---------------------------------------------------------------------------------------------
# gated activations (GEGLU / SwiGLU) on [gate, up]
# ---------------------------------------------------------------------------------------------


@torch.library.custom_op(f"{NAMESPACE}::gated", mutates_args=())
def gated(z: torch.Tensor, kind: str, approximate: str) -> torch.Tensor:
    """``kernels.ops.geglu.geglu`` (kind "geglu") or ``swiglu`` of z [..., 2r] -> [..., r], row-major."""
    from kernels.ops.geglu import geglu, swiglu

    z = z.contiguous()
    with torch.no_grad():
        out = geglu(z, approximate, check_finite=False) if kind == "geglu" else swiglu(z, check_finite=False)
    return out.contiguous()


@gated.register_fake
def _(z, kind, approximate):
    return z.new_empty(*z.shape[:-1], z.shape[-1] // 2)


@torch.library.custom_op(f"{NAMESPACE}::gated_backward", mutates_args=())
def gated_backward(z: torch.Tensor, g: torch.Tensor, kind: str, approximate: str) -> torch.Tensor:
    """dz [..., 2r] of the gated activation for the output gradient g [..., r], row-major."""
    from kernels.ops.geglu import launch_backward

    z, g = z.contiguous(), g.to(z.dtype).contiguous()
    if not use_triton(z):
        return gated_backward_reference(z, g, kind, approximate).contiguous()
    dz = torch.empty_like(z)
    launch_backward(z, g, dz, False, gated_act(kind, approximate))
    return dz


@gated_backward.register_fake
def _(z, g, kind, approximate):
    return torch.empty(z.shape, dtype=z.dtype, device=z.device)


def _gated_setup_context(ctx, inputs, output) -> None:
    z, kind, approximate = inputs
    ctx.save_for_backward(z)
    ctx.args = (kind, approximate)


def _gated_backward(ctx, g):
    (z,) = ctx.saved_tensors
    return gated_backward(z, g, *ctx.args), None, None


gated.register_autograd(_gated_backward, setup_context=_gated_setup_context)


__all__ = [
    "NAMESPACE",
    "gated",
    "gated_backward",
    "act_pack_fuses",
    "linear",
    "linear_act",
    "linear_act_backward",
    "linear_backward",
    "nm24_mask",
    "pair_shapes",
    "repack_pair",
    "take_seed",
    "transposable_mask",
]
