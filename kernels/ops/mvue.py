"""Minimum-variance unbiased 2:4 sparsification (MVUE; Chmiel et al. 2023, used by Hu et al. 2024, Eq. 6).

For every group of 4 consecutive elements along ``dim`` the estimator keeps exactly 2 of them so
that the sparse result is unbiased, ``E[out] = x``, with minimum variance among such estimators:

* inclusion probabilities ``q_i = 2|x_i| / S`` with ``S = sum |x|`` of the group;
* if one element holds more than half the mass (``|x_j| > sum of the other three``) it gets
  ``q_j = 1`` and the others ``q_i = |x_i| / (S - |x_j|)``;
* exactly two positions are drawn with ``P(keep i) = q_i`` by systematic sampling: with the
  cumulative sums ``C_k`` of ``q`` in element order and one uniform ``u`` in [0, 1) per group,
  element ``i`` is kept when ``[C_{i-1}, C_i)`` contains ``u`` or ``u + 1``;
* kept values are ``x_i / q_i``, the others 0.

Implementation notes (kernel and reference run the *same* fp32 operation sequence, so given the
same uniforms they agree bit for bit):

* ``x_i / q_i`` is computed without a division: it equals ``sign(x_i) * T`` with ``T = S / 2``
  (no dominant element) or ``T = S - |x_j|`` (dominant ``j``), and ``x_j`` itself for the
  dominant element. The sampling thresholds are compared in "mass units": ``u * T`` against the
  cumulative sums of ``w_i = q_i * T`` (``w_i = |x_i|``, or ``w_j = T`` for the dominant one).
  No fp32 division anywhere, so GPU and interpreter agree too (no approximate-division drift).
* ``S - |x_j|`` is computed as the sum of the other three magnitudes, so a tiny second nonzero
  next to a huge one is not lost to cancellation.
* Degenerate groups (all zero, or a single nonzero) keep the nonzero (value ``x_j``, ``q_j = 1``)
  or position 0 and one more position (value 0) deterministically; zero-mass elements are
  never drawn otherwise. Exactly two positions are kept in every group; if fp32 rounding ever
  puts both points in one interval (probability ~1e-7), the next position is kept as well.
* Inputs must satisfy ``max|x| <= finfo(float32).max / 8`` (fp32 intermediates cannot
  overflow; ValueError otherwise). Outputs can reach ``2 * max|x|`` of the group; if that
  overflows the output dtype (fp16 only in practice) a ValueError is raised instead of
  returning Inf.

Randomness: the Triton kernel draws ``u`` for group ``g`` (groups numbered in the order of
``x.movedim(dim, -1)`` flattened) as component ``g % 4`` of ``tl.rand4x(seed, g // 4)``
(Philox4x32-10: one call gives four independent uniforms, so a kernel that holds four consecutive
groups computes it once; the fused MVUE pack does, ~5% faster on an H100 than one call per
group). :func:`mvue24_uniforms` returns exactly those uniforms so that :func:`mvue24_reference`
can be compared exactly against the kernel. On the plain-PyTorch path (CPU without the
interpreter) ``u`` comes from ``torch.rand``; a given ``seed`` is reproducible per path but the
two paths draw differently.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.ops.common import (
    FLOAT_DTYPES,
    cast_out,
    cdiv,
    check_divisible,
    check_int,
    check_same_device,
    check_tensor,
    use_triton,
)

GROUP = 4
_F32_MAX = torch.finfo(torch.float32).max
_SEED_BOUND = 2**31 - 1  # seeds drawn from a generator lie in [0, 2**31 - 1)

# --------------------------------------------------------------------------------------------
# Triton
# --------------------------------------------------------------------------------------------


@triton.jit
def group_uniform(seed, g):
    """The uniform of group ``g``: component ``g % 4`` of ``tl.rand4x(seed, g // 4)``."""
    r0, r1, r2, r3 = tl.rand4x(seed, g // 4)
    q = g % 4
    return tl.where(q == 0, r0, tl.where(q == 1, r1, tl.where(q == 2, r2, r3)))


@triton.jit
def mvue_pair(x0, x1, x2, x3, u):
    """MVUE of groups given as four fp32 vectors (element 0..3 of each group) and uniforms u, as
    the two kept positions ``lo < hi`` (int32) and their values ``v_lo``, ``v_hi`` (fp32): only
    the kept pair is valued (what a pack stores), not all four elements."""
    a0 = tl.abs(x0)
    a1 = tl.abs(x1)
    a2 = tl.abs(x2)
    a3 = tl.abs(x3)
    a01 = a0 + a1
    a23 = a2 + a3
    s = a01 + a23
    # mass of the other three elements, summed directly (no cancellation S - |x_j|)
    r0 = a1 + a23
    r1 = a0 + a23
    r2 = a01 + a3
    r3 = a01 + a2
    # dominant element: more than half the mass; at most one per group
    d0 = a0 > r0
    d1 = a1 > r1
    d2 = a2 > r2
    d3 = a3 > r3
    # T = mass per kept slot (r_j of the dominant j, else S / 2); w_i = q_i * T (sum w = 2T)
    t = tl.where(d0, r0, tl.where(d1, r1, tl.where(d2, r2, tl.where(d3, r3, s * 0.5))))
    c0 = tl.where(d0, r0, a0)
    c1 = c0 + tl.where(d1, r1, a1)
    c2 = c1 + tl.where(d2, r2, a2)
    # systematic sampling: points u*T and (u+1)*T; interval index = number of thresholds <= point
    p0 = u * t
    p1 = (u + 1.0) * t
    i1 = (c0 <= p0).to(tl.int32) + (c1 <= p0).to(tl.int32) + (c2 <= p0).to(tl.int32)
    i2 = (c0 <= p1).to(tl.int32) + (c1 <= p1).to(tl.int32) + (c2 <= p1).to(tl.int32)
    same = i1 == i2  # only through fp32 rounding
    i2 = tl.where(same & (i1 < 3), i1 + 1, i2)
    i1 = tl.where(same & (i1 == 3), 2, i1)
    # degenerate (T == 0: all zero, or a single nonzero): keep it (or position 0) and one more
    deg = t == 0.0
    jd = d1.to(tl.int32) + 2 * d2.to(tl.int32) + 3 * d3.to(tl.int32)
    i1 = tl.where(deg, jd, i1)
    i2 = tl.where(deg, (jd == 0).to(tl.int32), i2)
    lo = tl.minimum(i1, i2)
    hi = tl.maximum(i1, i2)
    x_lo = tl.where(lo == 0, x0, tl.where(lo == 1, x1, x2))
    x_hi = tl.where(hi == 3, x3, tl.where(hi == 2, x2, x1))
    # x_i / q_i: x_i itself where |x_i| > T (the dominant element), sign(x_i) * T otherwise
    v_lo = tl.where(tl.abs(x_lo) > t, x_lo, tl.where(x_lo > 0, t, tl.where(x_lo < 0, -t, 0.0)))
    v_hi = tl.where(tl.abs(x_hi) > t, x_hi, tl.where(x_hi > 0, t, tl.where(x_hi < 0, -t, 0.0)))
    return lo, hi, v_lo, v_hi


@triton.jit
def _mvue_group(x0, x1, x2, x3, u):
    """MVUE of groups given as four fp32 vectors (element 0..3 of each group) and uniforms u:
    the four output vectors (fp32) and the four keep flags (:func:`mvue_pair` spread out)."""
    lo, hi, v_lo, v_hi = mvue_pair(x0, x1, x2, x3, u)
    k0 = lo == 0
    k1 = (lo == 1) | (hi == 1)
    k2 = (lo == 2) | (hi == 2)
    k3 = hi == 3
    o0 = tl.where(k0, v_lo, 0.0)
    o1 = tl.where(lo == 1, v_lo, tl.where(hi == 1, v_hi, 0.0))
    o2 = tl.where(lo == 2, v_lo, tl.where(hi == 2, v_hi, 0.0))
    o3 = tl.where(k3, v_hi, 0.0)
    return o0, o1, o2, o3, k0, k1, k2, k3


@triton.jit
def _mvue24_rows_kernel(
    x_ptr,
    out_ptr,
    mask_ptr,
    seed,
    n_groups,
    WRITE_MASK: tl.constexpr,
    BLOCK_G: tl.constexpr,
    seed_ptr=None,
    SEED_FROM_PTR: tl.constexpr = False,
):
    """Groups are 4 contiguous elements (dim is the innermost one): coalesced [BLOCK_G, 4] tiles.

    ``SEED_FROM_PTR``: the seed is the int64 at ``seed_ptr`` (read on the device, so a CUDA graph
    that captured the launch draws with whatever seed the tensor holds at replay)."""
    if SEED_FROM_PTR:
        seed = tl.load(seed_ptr)
    pid = tl.program_id(0).to(tl.int64)
    g = pid * BLOCK_G + tl.arange(0, BLOCK_G)
    gmask = g < n_groups
    offs = g[:, None] * 4 + tl.arange(0, 4)[None, :]
    lmask = gmask[:, None]
    x = tl.load(x_ptr + offs, mask=lmask, other=0.0).to(tl.float32)
    # [G, 4] -> [G, 2, 2]: (i, j) holds element 2i + j
    ev, od = tl.split(tl.reshape(x, (BLOCK_G, 2, 2)))  # ev: elements 0, 2; od: elements 1, 3
    x0, x2 = tl.split(ev)
    x1, x3 = tl.split(od)
    u = group_uniform(seed, g)
    o0, o1, o2, o3, k0, k1, k2, k3 = _mvue_group(x0, x1, x2, x3, u)
    o = tl.reshape(tl.join(tl.join(o0, o2), tl.join(o1, o3)), (BLOCK_G, 4))
    tl.store(out_ptr + offs, cast_out(o, out_ptr), mask=lmask)
    if WRITE_MASK:
        k = tl.reshape(tl.join(tl.join(k0, k2), tl.join(k1, k3)), (BLOCK_G, 4))
        tl.store(mask_ptr + offs, k, mask=lmask)


@triton.jit
def _mvue24_strided_kernel(
    x_ptr,
    out_ptr,
    mask_ptr,
    seed,
    inner,
    n_groups_dim,
    n_iblocks,
    WRITE_MASK: tl.constexpr,
    BLOCK_I: tl.constexpr,
    seed_ptr=None,
    SEED_FROM_PTR: tl.constexpr = False,
):
    """x viewed as (outer, 4 * n_groups_dim, inner) with inner > 1: the four elements of a group
    are ``inner`` apart; a program handles one (outer, group) row and BLOCK_I inner positions,
    so each of the four loads is coalesced. The uniform index is that of the group in
    ``x.movedim(dim, -1)``: ``(o * inner + i) * n_groups_dim + g``. ``SEED_FROM_PTR``: as in
    the rows kernel."""
    if SEED_FROM_PTR:
        seed = tl.load(seed_ptr)
    pid = tl.program_id(0).to(tl.int64)
    row = pid // n_iblocks  # o * n_groups_dim + g
    ib = pid % n_iblocks
    i = ib * BLOCK_I + tl.arange(0, BLOCK_I)
    m = i < inner
    base = row * 4 * inner + i
    x0 = tl.load(x_ptr + base, mask=m, other=0.0).to(tl.float32)
    x1 = tl.load(x_ptr + base + inner, mask=m, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + base + 2 * inner, mask=m, other=0.0).to(tl.float32)
    x3 = tl.load(x_ptr + base + 3 * inner, mask=m, other=0.0).to(tl.float32)
    o = row // n_groups_dim
    g = row % n_groups_dim
    u = group_uniform(seed, (o * inner + i) * n_groups_dim + g)
    o0, o1, o2, o3, k0, k1, k2, k3 = _mvue_group(x0, x1, x2, x3, u)
    tl.store(out_ptr + base, cast_out(o0, out_ptr), mask=m)
    tl.store(out_ptr + base + inner, cast_out(o1, out_ptr), mask=m)
    tl.store(out_ptr + base + 2 * inner, cast_out(o2, out_ptr), mask=m)
    tl.store(out_ptr + base + 3 * inner, cast_out(o3, out_ptr), mask=m)
    if WRITE_MASK:
        tl.store(mask_ptr + base, k0, mask=m)
        tl.store(mask_ptr + base + inner, k1, mask=m)
        tl.store(mask_ptr + base + 2 * inner, k2, mask=m)
        tl.store(mask_ptr + base + 3 * inner, k3, mask=m)


@triton.jit
def _uniforms_kernel(u_ptr, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(u_ptr + offs, group_uniform(seed, offs), mask=offs < n)


_BLOCK_G = 256
_BLOCK_I_MAX = 512  # H100: 256 groups x 4 warps (rows) and 512 x 4 (strided) are near the best tried
_BLOCK_U = 1024
# No fp32 multiply-add contraction: with it the compiler fuses the uniform's scaling into u + 1
# (one rounding fewer than the reference and the fused pack kernels, which a rounding tie in
# about one group of 16M then shows; results/tuning/h100_probe_pack_kernels_1a204c2.txt).
_NO_FMA = {"enable_fp_fusion": False}

# --------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------


def _norm_dim(x: torch.Tensor, dim: object) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim={dim} is out of range for x of shape {tuple(x.shape)}")
    return dim % x.dim()


def _check_seed(seed: object) -> int:
    """An int in [0, 2**63): MVUE seeds are int64 device tensors (flex seeds stay int32 kernel
    arguments, hence their smaller range); the shared ``check_int`` names the argument."""
    return check_int("seed", seed, lo=0, hi=2**63 - 1)


def check_mvue_input(x: object, dim: object) -> tuple[torch.Tensor, int, float]:
    """Check x and dim; return (x, normalised dim, max|x|)."""
    x = check_tensor("x", x, dtypes=FLOAT_DTYPES, min_ndim=1, finite=False)
    d = _norm_dim(x, dim)
    check_divisible(f"x.shape[{d}] (dim={dim})", x.shape[d], GROUP, "2:4 group size")
    if x.numel() == 0:
        return x, d, 0.0
    # one pass gives both the finiteness check (min/max propagate NaN and Inf) and the range
    lo, hi = torch.aminmax(x.detach())
    amax = max(-float(lo), float(hi))
    if not math.isfinite(amax):
        raise ValueError("x contains NaN or Inf; refusing to compute on non-finite values")
    if amax > _F32_MAX / 8:
        raise ValueError(f"max|x| = {amax:.3e} exceeds float32 max / 8; the fp32 intermediates of MVUE could overflow")
    return x, d, amax


def check_output_range(out: torch.Tensor, amax: float) -> None:
    """Kept values reach up to 2 * max|x|: only then can the output dtype overflow; refuse Inf."""
    if amax > torch.finfo(out.dtype).max / 2 and not bool(torch.isfinite(out).all()):
        raise ValueError(
            f"MVUE output overflows {str(out.dtype).replace('torch.', '')}: kept values x/q reach "
            f"2 * max|x| = {2 * amax:.3e}; cast x to float32 first"
        )


def _split_dims(shape: torch.Size, d: int) -> tuple[int, int, int]:
    outer = math.prod(shape[:d])
    inner = math.prod(shape[d + 1 :])
    return outer, shape[d], inner


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def mvue24_uniforms(seed: int, n_groups: int, device: torch.device | str) -> torch.Tensor:
    """The float32 uniforms (component ``g % 4`` of ``tl.rand4x(seed, g // 4)``) for g in
    [0, n_groups) that the MVUE kernels use.

    Needs Triton (CUDA, or CPU under ``TRITON_INTERPRET=1``)."""
    seed = _check_seed(seed)
    n_groups = check_int("n_groups", n_groups, lo=0)
    u = torch.empty(n_groups, dtype=torch.float32, device=device)
    if not use_triton(u):
        raise RuntimeError(
            "mvue24_uniforms needs Triton: a CUDA device, or CPU with TRITON_INTERPRET=1 set before triton is imported"
        )
    if n_groups:
        _uniforms_kernel[(cdiv(n_groups, _BLOCK_U),)](u, seed, n_groups, BLOCK=_BLOCK_U)
    return u


def _mvue24_into(
    x: torch.Tensor,
    out: torch.Tensor,
    mask_out: torch.Tensor | None,
    seed: int,
    dim: int = -1,
    seed_tensor: torch.Tensor | None = None,
) -> None:
    """Launch the MVUE kernel: x, out (same shape and dtype) and mask_out (bool, same shape, or
    None) contiguous on one device; every element of out (and mask_out) is written. No value
    checks here: the public entry point validates. With ``seed_tensor`` (int64, one element, on
    x's device) the kernel reads the seed from it and ``seed`` is ignored."""
    d = dim % x.dim()
    assert x.is_contiguous() and out.is_contiguous() and out.shape == x.shape and out.dtype == x.dtype
    if mask_out is not None:
        assert mask_out.is_contiguous() and mask_out.shape == x.shape and mask_out.dtype == torch.bool
    if x.numel() == 0:
        return
    outer, length, inner = _split_dims(x.shape, d)
    n_groups_dim = length // GROUP
    write_mask = mask_out is not None
    mptr = mask_out if write_mask else out
    # seed from a device tensor: the launch carries the tensor, not a host value (graph-safe)
    seed_kw = {} if seed_tensor is None else {"seed_ptr": seed_tensor, "SEED_FROM_PTR": True}
    if seed_tensor is not None:
        seed = 0
    if inner == 1:
        n_groups = outer * n_groups_dim
        grid = (cdiv(n_groups, _BLOCK_G),)
        kw = {**seed_kw, **_NO_FMA}
        _mvue24_rows_kernel[grid](x, out, mptr, seed, n_groups, WRITE_MASK=write_mask, BLOCK_G=_BLOCK_G, **kw)
    else:
        kw = {**seed_kw, **_NO_FMA}
        block_i = max(16, min(_BLOCK_I_MAX, triton.next_power_of_2(inner)))
        n_iblocks = cdiv(inner, block_i)
        grid = (outer * n_groups_dim * n_iblocks,)
        _mvue24_strided_kernel[grid](
            x, out, mptr, seed, inner, n_groups_dim, n_iblocks, WRITE_MASK=write_mask, BLOCK_I=block_i, **kw
        )


def _check_generator(generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def _draw_seed(generator: torch.Generator | None) -> int:
    if generator is None:
        return int(torch.randint(0, _SEED_BOUND, (1,)).item())
    return int(torch.randint(0, _SEED_BOUND, (1,), generator=generator, device=generator.device).item())


def mvue24(
    x: torch.Tensor,
    dim: int = -1,
    generator: torch.Generator | None = None,
    *,
    seed: int | None = None,
    return_mask: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Minimum-variance unbiased 2:4 sparsification of ``x`` along ``dim`` (size divisible by 4).

    Returns a tensor of x's shape and dtype (contiguous) with exactly 2 nonzero positions per
    group of 4, ``E[out] = x``; with ``return_mask`` also the bool keep-mask (True = kept,
    exactly 2 per group, kept positions may hold 0 in groups with fewer than 2 nonzeros).
    Randomness: ``seed`` if given, else one int drawn from ``generator`` (or torch's default).
    """
    x, d, amax = check_mvue_input(x, dim)
    if x.requires_grad and torch.is_grad_enabled():
        # The kernel's output has no backward, the CPU fallback's had one: refuse on both paths
        # rather than drop a gradient silently on one of them.
        raise ValueError(
            "mvue24 has no backward (it estimates a gradient, E[out] = x): pass x.detach() or call it "
            "under torch.no_grad()"
        )
    _check_generator(generator)
    if seed is not None:
        seed = _check_seed(seed)
    if not use_triton(x):
        if seed is not None:
            generator = torch.Generator(device=x.device).manual_seed(seed)
        return mvue24_reference(x, d, generator=generator, return_mask=return_mask)
    if seed is None:
        seed = _draw_seed(generator)
    xc = x.contiguous()
    out = torch.empty_like(xc, memory_format=torch.contiguous_format)
    mask = torch.empty(xc.shape, dtype=torch.bool, device=x.device) if return_mask else None
    _mvue24_into(xc, out, mask, seed, d)
    check_output_range(out, amax)
    return (out, mask) if return_mask else out


def _mvue_groups_reference(xg: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MVUE on fp32 groups xg [N, 4] with uniforms u [N]; same operation sequence as the kernel
    (:func:`mvue_pair`)."""
    a0, a1, a2, a3 = xg.abs().unbind(-1)
    a01 = a0 + a1
    a23 = a2 + a3
    s = a01 + a23
    r = torch.stack([a1 + a23, a0 + a23, a01 + a3, a01 + a2], dim=-1)
    a = torch.stack([a0, a1, a2, a3], dim=-1)
    dom = a > r
    anyd = dom.any(-1)
    rd = torch.where(dom, r, torch.zeros_like(r)).sum(-1)  # at most one nonzero term: exact
    t = torch.where(anyd, rd, s * 0.5)
    w = torch.where(dom, r, a)
    c0 = w[:, 0]
    c1 = c0 + w[:, 1]
    c2 = c1 + w[:, 2]
    p0 = u * t
    p1 = (u + 1.0) * t
    i1 = (c0 <= p0).int() + (c1 <= p0).int() + (c2 <= p0).int()
    i2 = (c0 <= p1).int() + (c1 <= p1).int() + (c2 <= p1).int()
    same = i1 == i2
    i2 = torch.where(same & (i1 < 3), i1 + 1, i2)
    i1 = torch.where(same & (i1 == 3), torch.full_like(i1, 2), i1)
    deg = t == 0
    jd = dom[:, 1].int() + 2 * dom[:, 2].int() + 3 * dom[:, 3].int()
    i1 = torch.where(deg, jd, i1)
    i2 = torch.where(deg, (jd == 0).int(), i2)
    pos = torch.arange(GROUP, device=xg.device, dtype=i1.dtype)
    keep = (i1[:, None] == pos) | (i2[:, None] == pos)
    tt = t[:, None]
    signed_t = torch.where(xg > 0, tt, torch.where(xg < 0, -tt, torch.zeros_like(xg)))
    val = torch.where(xg.abs() > tt, xg, signed_t)
    out = torch.where(keep, val, torch.zeros_like(xg))
    return out, keep


def mvue24_reference(
    x: torch.Tensor,
    dim: int = -1,
    u: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    return_mask: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Plain-PyTorch MVUE 2:4 along ``dim``.

    ``u``: float32 uniforms in [0, 1), one per group (numel = x.numel() // 4), groups numbered
    in the order of ``x.movedim(dim, -1)`` flattened; pass ``mvue24_uniforms(seed, n, device)``
    to reproduce the Triton kernel bit for bit. Without ``u`` they are drawn with
    ``torch.rand(generator=generator)``.
    """
    x, d, amax = check_mvue_input(x, dim)
    _check_generator(generator)
    n_groups = x.numel() // GROUP
    if u is None:
        u = torch.rand(n_groups, generator=generator, device=x.device, dtype=torch.float32)
    else:
        u = check_tensor("u", u, dtypes=(torch.float32,), finite=True)
        check_same_device(x=x, u=u)
        if u.numel() != n_groups:
            raise ValueError(f"u has {u.numel()} elements; x has {n_groups} groups of 4 along dim {dim}")
        if u.numel() and not bool(((u >= 0) & (u < 1)).all()):
            raise ValueError("u must lie in [0, 1)")
    xm = x.movedim(d, -1)
    xg = xm.reshape(-1, GROUP).to(torch.float32)
    out, keep = _mvue_groups_reference(xg, u.reshape(-1))
    out = out.to(x.dtype).reshape(xm.shape).movedim(-1, d).contiguous()
    keep = keep.reshape(xm.shape).movedim(-1, d).contiguous()
    check_output_range(out, amax)
    return (out, keep) if return_mask else out


def mvue24_seed_tensor(
    device: torch.device | str | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A fresh int64 seed tensor (shape [1]) for :func:`mvue24_nocheck`, drawn on the host from
    ``generator`` (or torch's default, so ``torch.manual_seed`` makes it reproducible)."""
    _check_generator(generator)
    seed = torch.randint(0, 2**62, (1,), dtype=torch.int64, generator=generator)
    return seed.to(device) if device is not None else seed


def check_seed_tensor(seed_tensor: object, x: torch.Tensor) -> torch.Tensor:
    if not isinstance(seed_tensor, torch.Tensor):
        raise TypeError(f"seed_tensor must be a torch.Tensor, got {type(seed_tensor).__name__}")
    if seed_tensor.dtype != torch.int64 or seed_tensor.numel() != 1:
        raise TypeError(
            f"seed_tensor must be an int64 tensor with one element, got {seed_tensor.dtype} of shape "
            f"{tuple(seed_tensor.shape)}"
        )
    if seed_tensor.device != x.device:
        raise ValueError(f"seed_tensor is on {seed_tensor.device} but x is on {x.device}")
    if not seed_tensor.is_contiguous():
        raise ValueError("seed_tensor must be contiguous (it is read and incremented in place)")
    return seed_tensor


def mvue24_nocheck(
    x: torch.Tensor,
    dim: int = -1,
    *,
    seed_tensor: torch.Tensor,
    out: torch.Tensor | None = None,
    mask_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """MVUE 2:4 along ``dim`` without value scans or host syncs, for CUDA-graph capture.

    The seed is read on the device from ``seed_tensor`` (int64, one element, on x's device, e.g.
    from :func:`mvue24_seed_tensor`), which is then incremented in place, so every call, and
    every replay of a graph that captured the call, draws fresh uniforms. Given the seed value
    ``s`` held before the call, the result equals ``mvue24(x, dim, seed=s)`` bit for bit.

    Only metadata is checked (types, shapes, dtypes, devices: no host sync). Not checked, so the
    caller's duty: x finite with ``max|x| <= float32 max / 8``, and kept values ``2 * max|x|``
    within the dtype's range. ``out`` (contiguous, x's shape and dtype) receives the result
    (else a new tensor); ``mask_out`` (bool, contiguous, x's shape) the keep-mask.
    """
    x = check_tensor("x", x, dtypes=FLOAT_DTYPES, min_ndim=1, finite=False)
    d = _norm_dim(x, dim)
    check_divisible(f"x.shape[{d}] (dim={dim})", x.shape[d], GROUP, "2:4 group size")
    check_seed_tensor(seed_tensor, x)
    for name, t, dtype in (("out", out, x.dtype), ("mask_out", mask_out, torch.bool)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != dtype:
            raise TypeError(f"{name} has dtype {t.dtype}; expected {dtype}")
        if t.shape != x.shape or t.device != x.device or not t.is_contiguous():
            raise ValueError(
                f"{name} must be contiguous with x's shape {tuple(x.shape)} on {x.device}, got shape "
                f"{tuple(t.shape)} on {t.device} (contiguous={t.is_contiguous()})"
            )
    xc = x.contiguous()
    if out is None:
        out = torch.empty_like(xc, memory_format=torch.contiguous_format)
    if use_triton(x):
        _mvue24_into(xc, out, mask_out, 0, d, seed_tensor=seed_tensor)
    else:  # plain PyTorch (CPU without the interpreter): same draws as mvue24(x, dim, seed=s) there
        gen = torch.Generator(device=x.device).manual_seed(int(seed_tensor.item()))
        u = torch.rand(x.numel() // GROUP, generator=gen, device=x.device, dtype=torch.float32)
        xm = xc.movedim(d, -1)
        o, keep = _mvue_groups_reference(xm.reshape(-1, GROUP).to(torch.float32), u)
        out.copy_(o.to(x.dtype).reshape(xm.shape).movedim(-1, d))
        if mask_out is not None:
            mask_out.copy_(keep.reshape(xm.shape).movedim(-1, d))
    seed_tensor.add_(1)  # on the device: the next call (or graph replay) draws afresh
    return out


def mvue24_bytes(x: torch.Tensor, return_mask: bool = False) -> int:
    """Minimum DRAM traffic of :func:`mvue24`: read x once, write out once (plus the bool mask)."""
    n = x.numel()
    b = 2 * n * x.element_size()
    if return_mask:
        b += n  # torch.bool: 1 byte per element
    return b


__all__ = ["mvue24", "mvue24_bytes", "mvue24_nocheck", "mvue24_reference", "mvue24_seed_tensor", "mvue24_uniforms"]
