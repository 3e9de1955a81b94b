"""Unstructured masks meet the budget with ties (issue 21, item 14): keep #(|w| > pivot) plus the
first round(tie * #(|w| == pivot)) entries equal to the pivot in flat index order (exactly k for a
single tensor), in ``flex_mask`` and in ``FlexMasker`` (device ops only)."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.flex import FlexMasker, flex_mask, tie_share
from kernels.ops.patterns import Unstructured
from kernels.ops.pivot import find_pivot, pivot_and_tie_16bit

U = Unstructured()
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def rule(w: torch.Tensor, pivot: float, n_eq_kept: int) -> torch.Tensor:
    """The documented rule, written plainly: |w| > pivot, plus the first n_eq_kept ties."""
    a = w.abs().float().flatten()
    keep = a > pivot
    keep[(a == pivot).nonzero().flatten()[:n_eq_kept]] = True
    return keep.reshape(w.shape)


def exact_k_mask(w: torch.Tensor, density: float) -> torch.Tensor:
    k = round(density * w.numel())
    pivot = find_pivot(w, density)
    gt = int((w.abs().float() > pivot).sum())
    return rule(w, pivot, k - gt)


# -- the reproducers of the issue ----------------------------------------------------------------


def test_all_zero_weight_keeps_the_budget():
    m = flex_mask(torch.zeros(64, 64), U, 0.1)
    assert int(m.sum()) == round(0.1 * 4096) == 410
    assert bool(m.flatten()[:410].all()) and not bool(m.flatten()[410:].any())  # lowest indices


def test_half_zero_weight_keeps_the_budget():
    torch.manual_seed(0)
    x = torch.randn(64, 64)
    x[:, :32] = 0
    m = flex_mask(x, U, 0.75)
    assert int(m.sum()) == 3072
    assert bool(m[:, 32:].all())  # every nonzero is above the pivot 0
    assert torch.equal(m, exact_k_mask(x, 0.75))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("density", [0.5, 0.1, 0.37, 0.9, 0.0, 1.0])
def test_single_tensor_keeps_exactly_k(dtype, density):
    torch.manual_seed(1)
    w = torch.randn(64, 64).to(dtype)
    m = flex_mask(w, U, density)
    assert m.dtype == torch.bool and m.shape == w.shape
    assert int(m.sum()) == round(density * w.numel())
    assert torch.equal(m, exact_k_mask(w, density))


def test_bf16_randn_at_half():
    torch.manual_seed(0)
    w = torch.randn(64, 64).bfloat16()
    assert float(flex_mask(w, U, 0.5).float().mean()) == 0.5


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_few_distinct_values(dtype):
    """Many ties at every level: integer-valued weights."""
    g = torch.Generator().manual_seed(2)
    w = torch.randint(-3, 4, (32, 96), generator=g).to(dtype)
    for density in (0.2, 0.5, 0.8):
        m = flex_mask(w, U, density)
        assert int(m.sum()) == round(density * w.numel())
        assert torch.equal(m, exact_k_mask(w, density))


def test_non_contiguous_input_uses_row_major_order():
    w = torch.zeros(16, 32)
    m = flex_mask(w.t(), U, 0.25)  # a [32, 16] view
    assert torch.equal(m, flex_mask(w.t().contiguous(), U, 0.25))
    assert bool(m.flatten()[:128].all()) and not bool(m.flatten()[128:].any())


# -- shared pivot and tie share ------------------------------------------------------------------


def test_shared_pivot_keeps_its_share_of_the_ties():
    g = torch.Generator().manual_seed(3)
    ws = [torch.randint(-2, 3, (16, 64), generator=g).float() for _ in range(3)]
    d = 0.55
    pivot = find_pivot(ws, d)
    tie = tie_share(ws, pivot, d)
    assert 0.0 < tie < 1.0
    total = 0
    for w in ws:
        n_eq = int((w.abs() == pivot).sum())
        m = flex_mask(w, U, d, pivot=pivot, tie=tie)
        assert torch.equal(m, rule(w, pivot, round(tie * n_eq)))
        total += int(m.sum())
    assert abs(total - round(d * sum(w.numel() for w in ws))) <= len(ws)
    # an explicit pivot without a tie share keeps every tie (tie = 1.0), as before
    w = ws[0]
    assert torch.equal(flex_mask(w, U, d, pivot=pivot), w.abs() >= pivot)
    assert torch.equal(flex_mask(w, U, d, pivot=pivot, tie=0.0), w.abs() > pivot)


# -- FlexMasker ----------------------------------------------------------------------------------


@pytest.mark.parametrize("interpret", ["1", "0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("density", [0.5, 0.1, 0.77])
def test_masker_single_weight_equals_flex_mask(dtype, density, interpret, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    torch.manual_seed(4)
    w = torch.randn(64, 128).to(dtype)
    masker = FlexMasker(w, U, density)
    (got,) = masker()
    assert int(got.sum()) == round(density * w.numel())
    assert torch.equal(got, flex_mask(w, U, density))
    w[:, :64] = 0  # in place: ties at the pivot 0
    (got,) = masker()
    assert int(got.sum()) == round(density * w.numel())
    assert torch.equal(got, flex_mask(w, U, density))


@pytest.mark.parametrize("interpret", ["1", "0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masker_all_zero_weight(dtype, interpret, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    (got,) = FlexMasker(torch.zeros(64, 64, dtype=dtype), U, 0.1)()
    assert torch.equal(got, flex_mask(torch.zeros(64, 64), U, 0.1))
    assert int(got.sum()) == 410


@pytest.mark.parametrize("interpret", ["1", "0"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masker_several_weights(dtype, interpret, monkeypatch):
    """The tie share applies per weight: each equals flex_mask with the exact shared (pivot, tie),
    the total is within len(weights) of k."""
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    g = torch.Generator().manual_seed(5)
    ws = [(0.02 * torch.randn(r, 64, generator=g)).to(dtype) for r in (32, 64, 16)]
    ws[1][:8] = 0
    d = 0.45
    masker = FlexMasker(ws, U, d)
    got = masker()
    if dtype == torch.float32:
        pivot = find_pivot(ws, d)
        tie = tie_share(ws, pivot, d)
    else:
        pivot, tie = pivot_and_tie_16bit(ws, d)
    assert masker.pivot_and_tie() == (pivot, torch.tensor(tie, dtype=torch.float32).item())
    assert float(masker.tie64) == tie
    for m, w in zip(got, ws, strict=True):
        assert torch.equal(m, flex_mask(w, U, d, pivot=pivot, tie=tie))
    k = round(d * sum(w.numel() for w in ws))
    assert abs(sum(int(m.sum()) for m in got) - k) <= len(ws)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_masker_unstructured_is_device_only(dtype, monkeypatch):
    """On the device-pivot path the Unstructured masks read the pivot state and the counts of the
    select kernel on the device: no value is read back to the host."""
    torch.manual_seed(6)
    ws = [torch.randn(32, 64).to(dtype), torch.zeros(16, 64, dtype=dtype)]
    masker = FlexMasker(ws, U, 0.6)
    assert masker._device_pivot
    want = [m.clone() for m in masker(check=False)]

    def refuse(*a, **k):
        raise AssertionError("host sync")

    for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    masker.tie64.fill_(-1.0)
    for m in masker.masks:
        m.fill_(True)
    masker._unstructured_masks()  # the launches of the pivot passes ran in the call above
    monkeypatch.undo()
    assert all(torch.equal(a, b) for a, b in zip(masker.masks, want, strict=True))
    assert abs(sum(int(m.sum()) for m in want) - round(0.6 * sum(w.numel() for w in ws))) <= len(ws)
