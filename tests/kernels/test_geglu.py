"""GEGLU / SwiGLU kernels against float64 references, in row- and column-major layouts.

Runs the Triton kernels on the CPU through the interpreter (conftest sets TRITON_INTERPRET=1).
Every tensor the module allocates is poisoned with NaN first, so an element a kernel forgets to
write shows up as NaN and rel_err reports +inf.
"""

from __future__ import annotations

import pytest
import torch

import kernels.ops.geglu as gm
from kernels.ops.geglu import geglu, geglu_bytes, geglu_intuitive, geglu_reference, swiglu, swiglu_reference
from tests.helpers import assert_close_rel, rel_err

TOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(8, 4), (33, 24), (64, 40)]  # (P rows, r)
OPS = ["geglu-none", "geglu-tanh", "swiglu"]


@pytest.fixture(autouse=True)
def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every output/gradient buffer the module allocates start as NaN."""
    real = gm.empty_in_layout

    def poisoned(z: torch.Tensor, last: int, col_major: bool) -> torch.Tensor:
        return real(z, last, col_major).fill_(float("nan"))

    monkeypatch.setattr(gm, "empty_in_layout", poisoned)


def _op(name: str):
    if name == "swiglu":
        return swiglu, swiglu_reference
    approx = name.split("-")[1]
    return (lambda z: geglu(z, approx)), (lambda z: geglu_reference(z, approx))


def _make(P: int, r: int, dtype: torch.dtype, col_major: bool, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if col_major:  # z2 == zt.t() for a contiguous zt [2r, P]
        return (2 * torch.randn(2 * r, P, generator=gen)).to(dtype).t()
    return (2 * torch.randn(P, 2 * r, generator=gen)).to(dtype)


def _assert_layout(t: torch.Tensor, col_major: bool) -> None:
    if col_major:
        assert t.stride() == (1, t.shape[0]), t.stride()
    else:
        assert t.stride() == (t.shape[1], 1), t.stride()


@pytest.mark.parametrize("col_major", [False, True], ids=["row", "col"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("P,r", SHAPES)
@pytest.mark.parametrize("name", OPS)
def test_forward_backward(name: str, P: int, r: int, dtype: torch.dtype, col_major: bool) -> None:
    fn, ref_fn = _op(name)
    z = _make(P, r, dtype, col_major, seed=P * 1000 + r).requires_grad_()
    out = fn(z)
    assert out.shape == (P, r) and out.dtype == dtype
    _assert_layout(out, col_major)
    zd = z.detach().double().requires_grad_()
    ref = ref_fn(zd)
    assert_close_rel(out, ref, TOL[dtype])

    gen = torch.Generator().manual_seed(7)
    g = torch.randn(P, r, generator=gen).to(dtype)
    (dz,) = torch.autograd.grad(out, z, g)
    (dz_ref,) = torch.autograd.grad(ref, zd, g.double())
    assert dz.shape == z.shape and dz.dtype == dtype
    _assert_layout(dz, col_major)
    assert_close_rel(dz, dz_ref, TOL[dtype])


@pytest.mark.parametrize("col_major", [False, True], ids=["row", "col"])
@pytest.mark.parametrize("approx", ["none", "tanh"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_intuitive(approx: str, dtype: torch.dtype, col_major: bool) -> None:
    for P, r in SHAPES:
        z = _make(P, r, dtype, col_major, seed=P + r)
        out = geglu_intuitive(z, approx)
        _assert_layout(out, col_major)
        assert_close_rel(out, geglu_reference(z.double(), approx), TOL[dtype])


@pytest.mark.parametrize("col_major", [False, True], ids=["row", "col"])
def test_wide_rows_span_several_column_blocks(col_major: bool) -> None:
    P, r = 3, 1030  # r > 1024: the row kernels and the intuitive kernel need two column blocks
    z = _make(P, r, torch.float32, col_major, seed=11).requires_grad_()
    ref = geglu_reference(z.detach().double(), "tanh")
    assert_close_rel(geglu(z, "tanh"), ref, 1e-5)
    assert_close_rel(geglu_intuitive(z, "tanh"), ref, 1e-5)
    out = swiglu(z)
    zd = z.detach().double().requires_grad_()
    (dz,) = torch.autograd.grad(out, z, torch.ones_like(out))
    (dz_ref,) = torch.autograd.grad(swiglu_reference(zd).sum(), zd)
    assert_close_rel(dz, dz_ref, 1e-5)


def test_nd_column_major_is_native_and_keeps_layout() -> None:
    r = 12
    z = torch.randn(2 * r, 4, 5).movedim(0, -1).requires_grad_()  # [4, 5, 2r], memory of [2r, 20]
    out = geglu(z)
    assert out.shape == (4, 5, r) and out.movedim(-1, 0).is_contiguous()
    zd = z.detach().double().requires_grad_()
    ref = geglu_reference(zd)
    assert_close_rel(out, ref, 1e-5)
    g = torch.randn(4, 5, r)  # row-major grad for a column-major output: converted inside
    (dz,) = torch.autograd.grad(out, z, g)
    (dz_ref,) = torch.autograd.grad(ref, zd, g.double())
    assert dz.movedim(-1, 0).is_contiguous()
    assert_close_rel(dz, dz_ref, 1e-5)
    assert_close_rel(geglu_intuitive(z, "none"), ref, 1e-5)


def test_nd_row_major_and_other_layouts() -> None:
    z = torch.randn(2, 3, 16)
    assert_close_rel(swiglu(z), swiglu_reference(z.double()), 1e-5)
    assert swiglu(z).is_contiguous()
    odd = torch.randn(9, 40)[:, 4:36]  # strided rows: neither layout, copied then row-major
    out = geglu(odd, "tanh")
    assert out.is_contiguous()
    assert_close_rel(out, geglu_reference(odd.double(), "tanh"), 1e-5)
    assert_close_rel(geglu_intuitive(odd), geglu_reference(odd.double()), 1e-5)


@pytest.mark.parametrize("col_major", [False, True], ids=["row", "col"])
@pytest.mark.parametrize("act", [gm.GELU_NONE, gm.GELU_TANH, gm.SILU])
def test_kernels_write_every_element(act: int, col_major: bool) -> None:
    P, r = 33, 24
    z = _make(P, r, torch.float16, col_major, seed=3)
    ref_fn = [lambda t: geglu_reference(t), lambda t: geglu_reference(t, "tanh"), swiglu_reference][act]
    for intuitive in (False, True):
        out = gm.empty_in_layout(z, r, col_major)  # poisoned by the fixture
        assert torch.isnan(out).all()
        gm._forward_into(z, out, act, intuitive=intuitive)
        assert torch.isfinite(out).all()
        assert_close_rel(out, ref_fn(z.double()), 1e-2)

    dout = gm.as_layout(torch.randn(P, r).half(), col_major)
    dz = gm.empty_in_layout(z, 2 * r, col_major)
    assert torch.isnan(dz).all()
    gm._backward_into(z, dout, dz, act)
    assert torch.isfinite(dz).all()
    zd = z.double().requires_grad_()
    (dz_ref,) = torch.autograd.grad(ref_fn(zd), zd, dout.double())
    assert_close_rel(dz, dz_ref, 1e-2)


def test_reference_fallback_without_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    z = _make(8, 4, torch.bfloat16, True, seed=5).requires_grad_()
    assert torch.equal(geglu(z, "tanh"), geglu_reference(z, "tanh"))
    assert torch.equal(swiglu(z), swiglu_reference(z))
    assert torch.equal(geglu_intuitive(z), geglu_reference(z))
    geglu(z).sum().backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()


def test_geglu_bytes() -> None:
    assert geglu_bytes(torch.empty(32, 512, 768, dtype=torch.float16)) == 32 * 512 * 768 * 2 * 3 // 2
    assert geglu_bytes(torch.empty(4, 8)) == (32 + 16) * 4


ENTRY_POINTS = [geglu, swiglu, geglu_intuitive]


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=lambda f: f.__name__)
def test_bad_inputs(fn) -> None:
    with pytest.raises(TypeError, match="dtype"):
        fn(torch.randn(4, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="dtype"):
        fn(torch.ones(4, 8, dtype=torch.int32))
    with pytest.raises(TypeError, match="torch.Tensor"):
        fn([[1.0, 2.0]])
    with pytest.raises(ValueError, match="last dimension.*divisible"):
        fn(torch.randn(4, 7))
    bad = torch.randn(4, 8)
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN or Inf"):
        fn(bad)
    bad[1, 2] = float("inf")
    with pytest.raises(ValueError, match="NaN or Inf"):
        fn(bad.t().contiguous().t())
    with pytest.raises(ValueError, match="non-empty"):
        fn(torch.randn(0, 8))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        fn(torch.tensor(1.0))


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=lambda f: f.__name__)
def test_check_finite_off_skips_only_the_nan_check(fn) -> None:
    z = torch.randn(4, 8)
    z[0, 0] = float("nan")
    out = fn(z, check_finite=False)  # no error; NaN propagates to its own output element only
    assert torch.isnan(out[0, 0]) and torch.isfinite(out[1:]).all()
    with pytest.raises(ValueError, match="divisible"):
        fn(torch.randn(4, 7), check_finite=False)


@pytest.mark.parametrize("fn", [geglu, geglu_intuitive, geglu_reference], ids=lambda f: f.__name__)
def test_bad_approximate(fn) -> None:
    with pytest.raises(ValueError, match="approximate"):
        fn(torch.randn(4, 8), "exact")
    with pytest.raises(ValueError, match="approximate"):
        fn(torch.randn(4, 8), None)


def test_rel_err_catches_nan() -> None:
    # Guard the guard: a NaN left in an output can never pass the comparisons above.
    assert rel_err(torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 1.0])) == float("inf")


@pytest.mark.parametrize("col_major", [False, True], ids=["row", "col"])
@pytest.mark.parametrize("name", ["geglu-none", "swiglu", "intuitive"])
def test_bf16_outputs_round_to_nearest_like_the_gpu(name: str, col_major: bool) -> None:
    """The kernels stored bf16 by a plain cast, which the interpreter truncates (the GPU rounds to
    nearest even): about half the outputs sat one ulp below the reference on the CPU."""
    z = _make(64, 128, torch.bfloat16, col_major, seed=3).requires_grad_()
    fn, ref_fn = _op(name) if name != "intuitive" else (geglu_intuitive, geglu_reference)
    out = fn(z)
    zf = z.detach().float().requires_grad_()
    ref = ref_fn(zf)  # fp32, rounded to nearest below
    assert (out != ref.to(torch.bfloat16)).float().mean() < 0.01
    g = torch.randn(64, 128, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    if name == "intuitive":
        return  # forward only
    (dz,) = torch.autograd.grad(out, z, g)
    (dz_ref,) = torch.autograd.grad(ref, zf, g.float())
    assert (dz != dz_ref.to(torch.bfloat16)).float().mean() < 0.01
