"""MVUE 2:4 sparsification: Triton kernel vs reference (bit-exact given the same uniforms),
2:4 structure, kept values x/q, unbiasedness with a bound that has power, degenerate groups,
poisoned outputs, bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

import kernels.ops.mvue as mvue_mod
from kernels.ops.mvue import _mvue24_into, mvue24, mvue24_bytes, mvue24_reference, mvue24_uniforms

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _rand_input(shape, dtype, seed):
    """Heavy-tailed magnitudes (so many groups have a dominant element), signs, some zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp(2.0 * torch.randn(shape, generator=g))
    x = torch.where(torch.rand(shape, generator=g) < 0.1, torch.zeros(()), x)
    return x.to(dtype)


def _n_groups(x):
    return x.numel() // 4


def _groups(t, dim):
    return t.movedim(dim, -1).reshape(-1, 4)


def _q_float64(xg: torch.Tensor) -> torch.Tensor:
    """Inclusion probabilities from the definition, independently of the implementation (float64).
    Rows with fewer than 2 nonzeros get NaN (no unique q there)."""
    a = xg.double().abs()
    s = a.sum(-1, keepdim=True)
    m, j = a.max(-1, keepdim=True)
    q = 2 * a / s
    dominant = (2 * m > s).squeeze(-1)
    rest = s - m
    qd = a / rest
    qd.scatter_(-1, j, 1.0)
    q = torch.where(dominant[:, None], qd, q)
    few = (a > 0).sum(-1) < 2
    q[few] = float("nan")
    return q


# --------------------------------------------------------------------------------------------
# kernel == reference
# --------------------------------------------------------------------------------------------

CASES = [
    ((8, 16), -1, torch.float32),
    ((12, 6), 0, torch.float32),
    ((2, 12, 3), 1, torch.float16),
    ((4, 5, 8), -1, torch.float16),
    ((16, 8), -1, torch.bfloat16),
    ((8, 300), 0, torch.bfloat16),  # strided path, inner > BLOCK_I (partial block)
    ((300, 8), -1, torch.float32),  # rows path, 600 groups > BLOCK_G (partial block)
    ((40,), 0, torch.float16),
]


@pytest.mark.parametrize("shape,dim,dtype", CASES)
def test_kernel_matches_reference_exactly(shape, dim, dtype):
    x = _rand_input(shape, dtype, seed=hash((shape, dim)) % 1000)
    for seed in (0, 12345, 2**40 + 7):
        out, mask = mvue24(x, dim, seed=seed, return_mask=True)
        u = mvue24_uniforms(seed, _n_groups(x), x.device)
        ref, ref_mask = mvue24_reference(x, dim, u=u, return_mask=True)
        assert out.shape == x.shape and out.dtype == x.dtype and mask.dtype == torch.bool
        assert torch.equal(mask, ref_mask)
        assert torch.equal(out, ref)
        assert (_groups(mask, dim).sum(-1) == 2).all()


def test_non_contiguous_input():
    base = _rand_input((16, 24), torch.float32, seed=3)
    for x, dim in ((base.t(), 0), (base.t(), 1), (base[:, ::3], 1), (base[::2].t(), 1)):
        assert not x.is_contiguous()
        out, mask = mvue24(x, dim, seed=99, return_mask=True)
        ref, ref_mask = mvue24_reference(x, dim, u=mvue24_uniforms(99, _n_groups(x), x.device), return_mask=True)
        assert torch.equal(out, ref) and torch.equal(mask, ref_mask)
        assert torch.equal(out, mvue24(x.contiguous(), dim, seed=99))


def test_negative_and_middle_dims_agree_with_movedim():
    x = _rand_input((4, 8, 6), torch.float32, seed=5)
    out = mvue24(x, 1, seed=7)
    out_moved = mvue24(x.movedim(1, -1).contiguous(), -1, seed=7)
    assert torch.equal(out, out_moved.movedim(-1, 1))
    assert torch.equal(mvue24(x, -2, seed=7), out)


# --------------------------------------------------------------------------------------------
# structure and values
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [-1, 0])
def test_two_of_four_and_values_are_x_over_q(dtype, dim):
    x = _rand_input((32, 16), dtype, seed=11)
    out, mask = mvue24(x, dim, seed=1, return_mask=True)
    og, mg, xg = _groups(out, dim), _groups(mask, dim), _groups(x, dim)
    assert (mg.sum(-1) == 2).all()
    assert torch.isfinite(out).all()
    assert (og[~mg] == 0).all()
    q = _q_float64(xg)
    ok = ~torch.isnan(q).any(-1)  # groups with >= 2 nonzeros
    assert ok.sum() > 0.8 * ok.numel()
    # q == 0 positions are never kept in regular groups
    assert not (mg[ok] & (q[ok] == 0)).any()
    kept = mg & ok[:, None]
    expect = xg.double()[kept] / q[kept]
    got = og.double()[kept]
    eps = torch.finfo(dtype).eps
    assert ((got - expect).abs() <= 2 * eps * expect.abs()).all()


def test_dominant_element_is_always_kept_exactly():
    x = torch.tensor([[10.0, 1.0, -2.0, 3.0], [0.5, -0.1, 0.2, -5.0], [1.0, 1e-20, 0.0, 0.0]])
    for seed in range(20):
        out, mask = mvue24(x, seed=seed, return_mask=True)
        assert mask[0, 0] and out[0, 0] == 10.0
        assert mask[1, 3] and out[1, 3] == -5.0
        assert torch.equal(out[2], x[2])  # q = (1, 1, 0, 0): exact
        assert (mask.sum(-1) == 2).all()


def test_rounding_fixup_keeps_two():
    """Groups where fp32 rounding makes S/2 < |x_0| although |x_0| = |x_1| + |x_2| + |x_3| (not
    dominant): with u = 0 both sampling points fall in element 0's interval; the fixup must
    still keep exactly 2 positions. (Reference only: u cannot be injected into the kernel, which
    runs the same operation sequence, see the exact-match tests.)"""
    r = torch.rand(20000, 3, generator=torch.Generator().manual_seed(0))
    a0 = r.sum(-1)
    x = torch.cat([a0[:, None], r], dim=-1)
    s = x[:, 0] + x[:, 1] + x[:, 2] + x[:, 3]
    x = x[s * 0.5 < x[:, 0]][:64]
    assert x.shape[0] == 64
    out, mask = mvue24_reference(x, u=torch.zeros(x.shape[0]), return_mask=True)
    assert (mask.sum(-1) == 2).all() and torch.isfinite(out).all()
    assert mask[:, 0].all()


# --------------------------------------------------------------------------------------------
# unbiasedness: a bound that can fail
# --------------------------------------------------------------------------------------------

N_DRAWS = 4000

# every nonzero has q >= ~0.1, so each is kept hundreds of times in N_DRAWS draws
X_UNBIASED = torch.tensor(
    [
        [1.0, -2.0, 3.0, -4.0],  # regular
        [0.3, 0.3, 0.3, 0.3],  # ties
        [8.0, 1.0, -0.5, 2.0],  # dominant: q = (1, 2/7, 1/7, 4/7)
        [0.0, 2.0, -1.0, 1.5],  # one zero
        [-1.0, 0.0, 0.0, 1.0],  # two nonzeros, q = (1, 0, 0, 1)
        [0.0, 0.0, -3.0, 0.0],  # single nonzero
        [0.0, 0.0, 0.0, 0.0],  # all zero
        [-5.0, 4.0, 1.0, 0.5],  # near-dominant regular: q = (1, .8, .2, .1)
    ]
)


def _draws(x: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """N_DRAWS independent MVUE draws of x (copies stacked; one uniform per group copy)."""
    xs = x.expand(N_DRAWS, *x.shape).contiguous()
    return mvue24(xs, -1, seed=seed, return_mask=True)


def _unbiased_violations(samples: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Elements where |mean - x| > 5 * sqrt(var / n) + tiny (sample variance of the draws), or
    where the mean is not finite (a NaN compares False, so NaN draws had passed)."""
    s = samples.double()
    n = s.shape[0]
    mean = s.mean(0)
    var = s.var(0, unbiased=True)
    tiny = 1e-6 * x.abs().max().item()
    return ~((mean - x.double()).abs() <= 5 * torch.sqrt(var / n) + tiny)


def test_unbiased():
    x = X_UNBIASED
    out, mask = _draws(x, seed=2024)
    bad = _unbiased_violations(out, x)
    assert not bad.any(), f"biased at {bad.nonzero().tolist()}"
    # inclusion frequencies match q (regular groups)
    q = _q_float64(x)
    ok = ~torch.isnan(q)
    freq = mask.double().mean(0)
    band = 5 * torch.sqrt(q * (1 - q) / N_DRAWS) + 1e-9
    assert ((freq - q).abs()[ok] <= band[ok]).all()


def test_unbiased_check_has_power():
    x = X_UNBIASED
    out, mask = _draws(x, seed=2024)
    # (a) keep the top-2 magnitudes without rescaling: deterministic and biased
    a = x.abs()
    top = torch.zeros_like(mask[0])
    top.scatter_(-1, a.topk(2, dim=-1).indices, True)
    biased_top2 = torch.where(top, x, torch.zeros_like(x)).expand_as(out)
    assert _unbiased_violations(biased_top2, x).any()
    # (b) MVUE draws rescaled by 1.25
    assert _unbiased_violations(out * 1.25, x).any()
    # (c) the dominant-element correction dropped: values sign(x) * S / 2 on the same masks
    s = a.sum(-1, keepdim=True)
    naive = torch.where(mask, torch.sign(x) * s / 2, torch.zeros_like(out))
    bad = _unbiased_violations(naive, x)
    assert bad.any()
    assert bad[2].any()  # the dominant group is where it goes wrong


# --------------------------------------------------------------------------------------------
# degenerate groups
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_degenerate_groups(dtype):
    rows = [
        [0.0, 0.0, 0.0, 0.0],
        [2.5, 0.0, 0.0, 0.0],
        [0.0, -1.5, 0.0, 0.0],
        [0.0, 0.0, 0.0, 7.0],
        [0.0, 3.0, 0.0, -3.0],
        [1.0, 0.0, 0.25, 0.0],
        [1000.0, 0.0, 0.0, 0.001],
        [100.0, 1.0, 1.0, 1.0],
        [-0.0, 0.0, -0.0, 0.0],
    ]
    x = torch.tensor(rows).to(dtype)
    xs = x.expand(64, *x.shape).contiguous()  # 64 draws of each group
    for seed in (0, 1):
        out, mask = mvue24(xs, seed=seed, return_mask=True)
        assert torch.isfinite(out).all()
        assert (mask.sum(-1) == 2).all()
        assert (out[~mask] == 0).all()
        nz = (x != 0).sum(-1)
        few = nz <= 2
        # fewer than 3 nonzeros: every nonzero has q = 1 and is reproduced exactly
        assert torch.equal(out[:, few], xs[:, few])
        assert mask[:, few][xs[:, few] != 0].all()
        # dominant element of the last regular row always kept exactly
        assert (out[:, 7, 0] == 100.0).all()


def test_extreme_magnitudes_stay_finite():
    x = torch.tensor(
        [
            [1e30, 1e-30, 0.0, 0.0],
            [1e-40, 0.0, 0.0, 0.0],
            [3e37, 3e37, 3e37, 3e37],
            [1e-38, 2e-38, 3e-38, 4e-38],
        ]
    )
    out, mask = mvue24(x, seed=5, return_mask=True)
    assert torch.isfinite(out).all() and (mask.sum(-1) == 2).all()
    assert torch.equal(out[:2], x[:2])
    ref = mvue24_reference(x, u=mvue24_uniforms(5, 4, "cpu"))
    assert torch.equal(out, ref)


# --------------------------------------------------------------------------------------------
# poisoned outputs: every element written, nothing outside
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,dim", [((300, 8), -1), ((8, 300), 0), ((2, 8, 5), 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_poisoned_outputs(shape, dim, dtype):
    x = _rand_input(shape, dtype, seed=21)
    n = x.numel()
    buf = torch.full((n + 64,), float("nan"), dtype=dtype)
    out = buf[:n].view(shape)
    masks = []
    for fill in (True, False):
        mbuf = torch.full((n + 64,), fill, dtype=torch.bool)
        _mvue24_into(x, out, mbuf[:n].view(shape), seed=77, dim=dim)
        assert (mbuf[n:] == fill).all()
        masks.append(mbuf[:n].view(shape).clone())
        assert torch.isfinite(out).all()
        assert torch.isnan(buf[n:]).all()
    assert torch.equal(masks[0], masks[1])
    ref, ref_mask = mvue24_reference(x, dim, u=mvue24_uniforms(77, n // 4, "cpu"), return_mask=True)
    assert torch.equal(out, ref) and torch.equal(masks[0], ref_mask)
    # without a mask output
    out.fill_(float("nan"))
    _mvue24_into(x, out, None, seed=77, dim=dim)
    assert torch.equal(out, ref)


# --------------------------------------------------------------------------------------------
# randomness plumbing
# --------------------------------------------------------------------------------------------


def test_seed_and_generator_determinism():
    x = _rand_input((16, 32), torch.float32, seed=8)
    assert torch.equal(mvue24(x, seed=3), mvue24(x, seed=3))
    assert not torch.equal(mvue24(x, seed=3), mvue24(x, seed=4))
    a = mvue24(x, generator=torch.Generator().manual_seed(10))
    b = mvue24(x, generator=torch.Generator().manual_seed(10))
    assert torch.equal(a, b)
    torch.manual_seed(0)
    c = mvue24(x)
    torch.manual_seed(0)
    assert torch.equal(c, mvue24(x))


def test_uniforms():
    u = mvue24_uniforms(42, 5000, "cpu")
    assert u.dtype == torch.float32 and u.shape == (5000,)
    assert ((u >= 0) & (u < 1)).all()
    assert abs(u.mean().item() - 0.5) < 0.02
    assert torch.equal(u[:100], mvue24_uniforms(42, 100, "cpu"))
    assert not torch.equal(u[:100], mvue24_uniforms(43, 100, "cpu"))
    assert mvue24_uniforms(1, 0, "cpu").numel() == 0
    # four consecutive groups share one Philox call: its four components, independent of each other
    quads = u[:4996].reshape(-1, 4)
    assert (quads[:, 0] != quads[:, 1]).all() and (quads[:, 2] != quads[:, 3]).all()
    corr = torch.corrcoef(quads.t())
    assert (corr - torch.eye(4)).abs().max() < 0.12


def test_plain_pytorch_path(monkeypatch):
    """CPU without the interpreter: reference with torch.rand uniforms, seed reproducible."""
    monkeypatch.setattr(mvue_mod, "use_triton", lambda t: False)
    x = _rand_input((8, 16), torch.float16, seed=4)
    out, mask = mvue24(x, 0, seed=5, return_mask=True)
    assert torch.equal(out, mvue24(x, 0, seed=5))
    assert (_groups(mask, 0).sum(-1) == 2).all()
    u = torch.rand(_n_groups(x), generator=torch.Generator().manual_seed(5))
    assert torch.equal(out, mvue24_reference(x, 0, u=u))


def test_empty_and_bytes():
    x = torch.empty(0, 8)
    out, mask = mvue24(x, seed=1, return_mask=True)
    assert out.shape == (0, 8) and mask.shape == (0, 8)
    assert mvue24_reference(torch.empty(3, 0), dim=1).shape == (3, 0)
    assert mvue24_bytes(torch.empty(4, 8, dtype=torch.float16)) == 2 * 32 * 2
    assert mvue24_bytes(torch.empty(4, 8), return_mask=True) == 2 * 32 * 4 + 32


# --------------------------------------------------------------------------------------------
# bad inputs
# --------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("fn", [lambda x, **k: mvue24(x, seed=0, **k), mvue24_reference])
def test_bad_inputs(fn):
    with pytest.raises(ValueError, match=r"x.shape\[1\]"):
        fn(torch.randn(4, 6))
    with pytest.raises(ValueError, match=r"x.shape\[0\]"):
        fn(torch.randn(6, 4), dim=0)
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = torch.randn(4, 8)
        x[1, 3] = bad
        with pytest.raises(ValueError, match="NaN or Inf"):
            fn(x)
    with pytest.raises(TypeError, match="dtype"):
        fn(torch.ones(4, 8, dtype=torch.int32))
    with pytest.raises(TypeError, match="dtype"):
        fn(torch.ones(4, 8, dtype=torch.float64))
    with pytest.raises(TypeError):
        fn([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="dimension"):
        fn(torch.tensor(1.0))
    with pytest.raises(ValueError, match="out of range"):
        fn(torch.randn(4, 8), dim=2)
    with pytest.raises(ValueError, match="overflow"):
        fn(torch.full((1, 4), 1e38))
    # fp16: kept values reach S/2 = 120000 > 65504
    with pytest.raises(ValueError, match="overflows"):
        fn(torch.full((2, 4), 60000.0, dtype=torch.float16))
    # large but safe fp16 values are fine (dominant element kept as is)
    out = fn(torch.tensor([[60000.0, 1.0, 0.0, 0.0]], dtype=torch.float16))
    assert torch.isfinite(out).all()


def test_bad_u_and_seed():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="groups"):
        mvue24_reference(x, u=torch.rand(7))
    with pytest.raises(TypeError, match="dtype"):
        mvue24_reference(x, u=torch.rand(8, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        mvue24_reference(x, u=torch.full((8,), 1.0))
    with pytest.raises(ValueError, match="seed"):
        mvue24(x, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        mvue24(x, seed=1.5)
    with pytest.raises(TypeError, match="dim"):
        mvue24(x, dim=1.0)


def test_sanity_of_q_helper():
    q = _q_float64(torch.tensor([[1.0, 1.0, 1.0, 1.0], [3.0, 1.0, 0.0, 0.0]]))
    assert torch.allclose(q, torch.tensor([[0.5] * 4, [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64))
    assert math.isclose(q.sum().item(), 4.0)


@pytest.mark.parametrize("interpret", [True, False], ids=["kernel", "fallback"])
def test_a_differentiable_input_is_refused_on_every_path(interpret, monkeypatch):
    """The kernel's output had no grad_fn and the CPU fallback's had one: a gradient through mvue24
    was dropped silently on one path only."""
    import kernels.ops.mvue as mm

    if not interpret:
        monkeypatch.setattr(mm, "use_triton", lambda x: False)
    x = torch.randn(4, 8, requires_grad=True)
    with pytest.raises(ValueError, match="no backward"):
        mvue24(x, seed=1)
    with torch.no_grad():
        assert mvue24(x, seed=1).shape == x.shape
    assert mvue24(x.detach(), seed=1).shape == x.shape


def test_unbiased_check_fails_on_nan_draws():
    """The check itself: NaN samples must count as violations, not pass."""
    x = torch.ones(2, 4)
    assert _unbiased_violations(torch.full((8, 2, 4), float("nan")), x).all()
    assert not _unbiased_violations(x.expand(8, 2, 4), x).any()


def test_uniforms_refuse_a_bad_count_and_need_triton(monkeypatch):
    with pytest.raises(ValueError, match="n_groups must be an int >= 0"):
        mvue24_uniforms(0, -1, "cpu")
    for bad in (2.0, True, None):  # not an int: a TypeError, as every check_int argument gives
        with pytest.raises(TypeError, match="n_groups must be an int"):
            mvue24_uniforms(0, bad, "cpu")
    u = mvue24_uniforms(0, 0, "cpu")
    assert u.shape == (0,) and u.dtype == torch.float32
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # plain CPU: no kernel can draw them
    with pytest.raises(RuntimeError, match="needs Triton"):
        mvue24_uniforms(0, 8, "cpu")
