"""Transposable 2:4 masks: Triton kernel (interpreter) vs PyTorch reference vs brute force."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels.ops.transposable as transposable_module
from kernels import (
    TRANSPOSABLE_24_PATTERNS,
    transposable_mask,
    transposable_mask_approx2,
    transposable_mask_reference,
)
from kernels.ops._gen_transposable import TARGET, render
from kernels.ops.transposable import as_tiles, exhaustive_triton, is_transposable_24


def brute_force_best(w: torch.Tensor) -> torch.Tensor:
    """Best retained |w| per tile over all 0/1 4x4 matrices with row and column sums 2 (float64)."""
    pats = [
        torch.tensor(c, dtype=torch.float64).reshape(4, 4)
        for c in itertools.product((0, 1), repeat=16)
        if all(sum(c[4 * r : 4 * r + 4]) == 2 for r in range(4)) and all(sum(c[k::4]) == 2 for k in range(4))
    ]
    assert len(pats) == 90
    p = torch.stack(pats).reshape(90, 16)
    return (as_tiles(w.double().abs()) @ p.T).amax(-1)


def retained(w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return as_tiles(w.double().abs() * mask).sum(-1)


def test_pattern_table():
    p = TRANSPOSABLE_24_PATTERNS
    assert p.shape == (90, 4, 4) and p.dtype == torch.bool
    assert (p.sum(1) == 2).all() and (p.sum(2) == 2).all()
    assert len({tuple(x.flatten().tolist()) for x in p}) == 90


def test_generated_kernel_is_current():
    assert TARGET.read_text() == render(), "run: python -m kernels.ops._gen_transposable"


@pytest.mark.parametrize("shape", [(4, 4), (8, 12), (36, 20), (20, 260)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_exhaustive_kernel_is_optimal(shape, dtype):
    w = torch.randn(shape, dtype=dtype)
    poisoned = torch.full(shape, 7, dtype=torch.uint8).view(torch.bool)
    mask = exhaustive_triton(w, out=poisoned)
    assert (mask.view(torch.uint8) <= 1).all(), "kernel left mask bytes unwritten"
    assert is_transposable_24(mask)
    best = brute_force_best(w)
    got = retained(w, mask)
    assert (got >= best * (1 - 1e-6)).all(), (best - got).max()
    assert (got <= best * (1 + 1e-9)).all()


def test_kernel_equals_reference_fp32():
    w = torch.randn(64, 96)
    assert torch.equal(exhaustive_triton(w), transposable_mask_reference(w))


def test_public_api_dispatch_and_noncontiguous():
    w = torch.randn(24, 16)
    wt = w.t()  # non-contiguous view
    m = transposable_mask(wt)
    assert m.shape == (16, 24) and is_transposable_24(m)
    assert torch.equal(m, transposable_mask_reference(wt.contiguous()))
    assert torch.equal(transposable_mask(w, method="reference"), transposable_mask_reference(w))


@settings(max_examples=25, deadline=None)
@given(
    tr=st.integers(1, 3),
    tc=st.integers(1, 3),
    ties=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_masks_are_valid_property(tr, tc, ties, seed):
    g = torch.Generator().manual_seed(seed)
    if ties:  # many equal magnitudes: tie-breaking must still give valid masks
        w = torch.randint(-2, 3, (4 * tr, 4 * tc), generator=g).float()
    else:
        w = torch.randn(4 * tr, 4 * tc, generator=g)
    best = brute_force_best(w)
    for method in ("exhaustive", "approx2", "reference"):
        m = transposable_mask(w, method=method)
        assert is_transposable_24(m), method
        kept = retained(w, m)
        bound = 0.5 * best if method == "approx2" else best
        assert (kept >= bound - 1e-6).all(), method


def test_approx2_greedy_stall_is_repaired():
    # Greedy takes (0,0), fills rows 1-3 on columns 1-3, then cannot complete row 0 / column 0.
    w = torch.full((4, 4), 0.01)
    w[0, 0] = 10
    w[1:, 1:] = torch.tensor([[9, 8, 0.5], [0.6, 7, 6], [5, 0.7, 4]])
    m = transposable_mask_approx2(w)
    assert is_transposable_24(m)
    assert m[0, 0]


@pytest.mark.parametrize(
    "w, kwargs, exc, match",
    [
        (torch.randn(16), {}, ValueError, "2-D"),
        (torch.randn(2, 4, 4), {}, ValueError, "2-D"),
        (torch.randn(6, 8), {}, ValueError, "divisible by the 4x4 tile"),
        (torch.randn(8, 10), {}, ValueError, "divisible by the 4x4 tile"),
        (torch.randn(8, 8), {"n": 1}, ValueError, "n=2, m=4"),
        (torch.randn(8, 8), {"method": "greedy"}, ValueError, "unknown method"),
        (torch.ones(8, 8, dtype=torch.int32), {}, TypeError, "dtype"),
        (torch.full((8, 8), float("nan")), {}, ValueError, "NaN"),
        ("not a tensor", {}, TypeError, "torch.Tensor"),
    ],
)
def test_bad_inputs(w, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        transposable_mask(w, **kwargs)


def python_greedy(tile: torch.Tensor) -> torch.Tensor | None:
    """Hubara et al.'s greedy on one 4x4 tile, written as the plain loop; None if it stalls."""
    keep = torch.zeros(4, 4, dtype=torch.bool)
    for idx in tile.abs().flatten().argsort(descending=True).tolist():
        i, j = divmod(idx, 4)
        if keep[i].sum() < 2 and keep[:, j].sum() < 2:
            keep[i, j] = True
    return keep if int(keep.sum()) == 8 else None


def test_approx2_equals_plain_greedy_loop():
    w = torch.randn(48, 64)
    m = transposable_mask_approx2(w)
    assert is_transposable_24(m)
    compared = 0
    for a in range(0, 48, 4):
        for b in range(0, 64, 4):
            g = python_greedy(w[a : a + 4, b : b + 4])
            if g is not None:
                assert torch.equal(m[a : a + 4, b : b + 4], g)
                compared += 1
    assert compared > 100


@pytest.mark.parametrize("subset", [False, True], ids=["branch-free", "subset"])
@pytest.mark.parametrize("dist", ["normal", "ties", "heavy"])
def test_approx2_completes_every_tile(dist, subset, monkeypatch):
    """About 16% of random tiles stall in the greedy; every one must come back complete, on both
    completion paths (branch-free for small chunks, stalled subset for large ones)."""
    monkeypatch.setattr(transposable_module, "SUBSET_REPAIR_TILES", 1 if subset else 1 << 30)
    g = torch.Generator().manual_seed(1)
    w = {
        "normal": lambda: torch.randn(256, 256, generator=g),
        "ties": lambda: torch.randint(-2, 3, (256, 256), generator=g).float(),
        "heavy": lambda: torch.randn(256, 256, generator=g) ** 5,
    }[dist]()
    m = transposable_mask_approx2(w)
    assert is_transposable_24(m)
    assert (retained(w, m) >= 0.5 * brute_force_best(w) - 1e-9).all()


def test_is_transposable_24_rejects_other_shapes_and_row_only_masks():
    w = torch.randn(8, 12, generator=torch.Generator().manual_seed(9))
    mask = transposable_mask_reference(w)
    assert is_transposable_24(mask)
    assert not is_transposable_24(mask[:, :10])  # columns not a multiple of 4
    assert not is_transposable_24(mask[:6])  # rows not a multiple of 4
    assert not is_transposable_24(mask.reshape(2, 4, 12))  # not 2-D
    assert not is_transposable_24(mask.reshape(-1))
    row_only = torch.tensor([[1, 1, 0, 0]] * 4, dtype=torch.bool)  # 2:4 along rows, columns 4 and 0
    assert not is_transposable_24(row_only)
