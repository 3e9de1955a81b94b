"""Argument checks of the public entry points (issue 21, item 16): wrong types and ranges raise a
TypeError / ValueError naming the argument, never an interpreter error, an AttributeError or a
silently wrong result."""

from __future__ import annotations

import math

import pytest
import torch

from kernels.layers.sparse_linear import SparseLinear
from kernels.ops.common import check_int
from kernels.ops.flex import FlexMasker, flex_mask, mask_quality
from kernels.ops.mvue import mvue24, mvue24_reference
from kernels.ops.nm_mask import nm_mask, nm_mask_reference
from kernels.ops.patterns import NM, TBS, Unstructured, Vegeta
from kernels.ops.pivot import find_pivot, find_pivot_stats
from kernels.ops.transposable import transposable_mask_approx2

BAD_SEEDS = [
    ("1", TypeError),
    (1.5, TypeError),
    (None, TypeError),
    (True, TypeError),
    (-1, ValueError),
    (2**40, ValueError),
    (2**31, ValueError),
]


# -- check_int ------------------------------------------------------------------------------------


def test_check_int():
    assert check_int("n", 3) == 3
    assert check_int("n", 0, lo=0, hi=0) == 0
    for bad in (True, 1.0, "1", None, torch.tensor(1)):
        with pytest.raises(TypeError, match="^n must be an int"):
            check_int("n", bad)
    with pytest.raises(ValueError, match="n must be a positive int, got 0"):
        check_int("n", 0, lo=1)
    with pytest.raises(ValueError, match=r"n must be an int in \[0, 3\], got 4"):
        check_int("n", 4, lo=0, hi=3)
    with pytest.raises(ValueError, match="n must be an int <= 3"):
        check_int("n", 4, hi=3)


# -- flex_mask seeds and pivots ------------------------------------------------------------------


@pytest.mark.parametrize("seed, exc", BAD_SEEDS, ids=repr)
@pytest.mark.parametrize("pattern", [TBS(4), Vegeta(4), Unstructured()], ids=str)
@pytest.mark.parametrize("method", ["fast", "torch"])
def test_flex_mask_refuses_bad_seeds_as_flexmasker_does(seed, exc, pattern, method):
    w = torch.randn(16, 64)
    with pytest.raises(exc, match="seed"):
        flex_mask(w, pattern, 0.5, method=method, seed=seed)
    with pytest.raises(exc, match="seed"):
        FlexMasker(w, pattern, 0.5, seed=seed)


def test_flex_mask_accepts_the_seed_range():
    w = torch.randn(16, 64)
    for seed in (0, 2**31 - 1):
        TBS(4).validate(flex_mask(w, TBS(4), 0.5, seed=seed))
        FlexMasker(w, TBS(4), 0.5, seed=seed)


@pytest.mark.parametrize("pattern", [TBS(4), Vegeta(4), Unstructured()], ids=str)
def test_flex_mask_refuses_nan_pivot(pattern):
    w = torch.randn(16, 64)
    with pytest.raises(ValueError, match="pivot.*NaN"):
        flex_mask(w, pattern, 0.5, pivot=float("nan"))
    for bad in ("0.5", True, [0.5]):
        with pytest.raises(TypeError, match="pivot"):
            flex_mask(w, pattern, 0.5, pivot=bad)


def test_negative_pivot_keeps_everything():
    """|w| >= 0 > pivot: a negative pivot is allowed and every entry counts as above it."""
    w = torch.randn(16, 64)
    assert bool(flex_mask(w, Unstructured(), 0.5, pivot=-1.0).all())
    assert bool(flex_mask(w, TBS(4), 0.5, pivot=-1.0).all())
    assert not bool(flex_mask(w, Unstructured(), 0.5, pivot=math.inf).any())


# -- patterns ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: TBS(True), TypeError, "TBS tile size"),
        (lambda: TBS(4.0), TypeError, "TBS tile size"),
        (lambda: TBS(0), ValueError, "positive"),
        (lambda: TBS(4, configs=(1.5,)), TypeError, "configs"),
        (lambda: TBS(4, configs=(True, 2)), TypeError, "configs"),
        (lambda: TBS(4, configs=3), TypeError, "configs"),
        (lambda: TBS(4, configs=(0, 5)), ValueError, "0..4"),
        (lambda: NM(True, 4), TypeError, "NM n"),
        (lambda: NM(2, True), TypeError, "NM m"),
        (lambda: NM(2.0, 4), TypeError, "NM n"),
        (lambda: NM(5, 4), ValueError, "0 <= n <= m"),
        (lambda: Vegeta(True), TypeError, "Vegeta"),
        (lambda: Vegeta(4, tile_len=-4), ValueError, "tile_len"),
        (lambda: Vegeta(4, tile_len=8.0), TypeError, "tile_len"),
        (lambda: Vegeta(4, tile_len=True), TypeError, "tile_len"),
        (lambda: Vegeta(4, configs=(1.5, 2)), TypeError, "configs"),
        (lambda: Vegeta(4, tile_len=6), ValueError, "not divisible"),
    ],
)
def test_bad_pattern_arguments(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_good_pattern_arguments_unchanged():
    assert TBS(4, configs=[0, 4, 2]).configs == (0, 2, 4)
    assert Vegeta(4).tile_len == 64 and Vegeta(4, tile_len=0) == Vegeta(4)  # 0: the default 16 * m
    assert Vegeta(4, tile_len=8).unit == 2
    assert NM(0, 4).configs == (0,)


# -- nm_mask on empty tensors --------------------------------------------------------------------


@pytest.mark.parametrize("interpret", ["1", "0"])
@pytest.mark.parametrize("shape, dim", [((8, 0), -1), ((0, 8), -1), ((0, 8), 0), ((2, 0, 4), 1), ((2, 0, 4), -1)])
def test_nm_mask_empty_gives_an_empty_mask(shape, dim, interpret, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    w = torch.empty(shape)
    for m in (nm_mask(w, 2, 4, dim), nm_mask_reference(w, 2, 4, dim)):
        assert m.shape == w.shape and m.dtype == torch.bool


# -- mvue24 generator, find_pivot group ----------------------------------------------------------


@pytest.mark.parametrize("interpret", ["1", "0"])
def test_mvue24_refuses_a_non_generator(interpret, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    x = torch.randn(8, 16)
    for bad in (5, "cpu", torch.device("cpu")):
        with pytest.raises(TypeError, match="generator"):
            mvue24(x, generator=bad)
        with pytest.raises(TypeError, match="generator"):
            mvue24_reference(x, generator=bad)
    out = mvue24(x, generator=torch.Generator().manual_seed(3))
    assert out.shape == x.shape


def test_find_pivot_refuses_a_non_group():
    x = torch.randn(64)
    for bad in (5, "world", object()):
        with pytest.raises(TypeError, match="group"):
            find_pivot(x, 0.5, group=bad)
        with pytest.raises(TypeError, match="group"):
            find_pivot_stats(x, 0.5, "radix", bad)
    assert find_pivot(x, 0.5, group=None) == x.abs().kthvalue(33).values.item()  # 32nd largest of 64


# -- load_sparse_state_dict with missing keys ----------------------------------------------------


def test_load_sparse_state_dict_names_missing_keys():
    layer = SparseLinear(16, 16, mode="fst")
    state = layer.sparse_state_dict()
    for missing in (["dense"], ["mask", "have_prev"], ["mode"]):
        bad = {k: v for k, v in state.items() if k not in missing}
        with pytest.raises(ValueError, match="missing") as info:
            layer.load_sparse_state_dict(bad)
        msg = str(info.value)
        assert all(repr(k) in msg for k in missing), msg
        assert "SparseLinear(in_features=16, out_features=16" in msg, msg
    layer.load_sparse_state_dict(state)  # the complete state still loads


# -- mask_quality and transposable_mask_approx2 (a hostile-input audit, session 51) ----------------


@pytest.mark.parametrize(
    "change, exc, match",
    [
        (lambda w, m, d: (w, m[:8], d), ValueError, "one shape"),
        (lambda w, m, d: (w, m.float(), d), TypeError, "mask has dtype"),
        (lambda w, m, d: (w, m, 1.5), ValueError, "density"),
        (lambda w, m, d: (w, m, float("nan")), ValueError, "density"),
        (lambda w, m, d: (w.masked_fill(m, float("nan")), m, d), ValueError, "NaN or Inf"),
        (lambda w, m, d: (w.to(torch.int32), m, d), TypeError, "w has dtype"),
    ],
)
def test_mask_quality_refuses_what_it_cannot_score(change, exc, match):
    """Before: a raw broadcasting or topk error for a wrong shape or density, and a number for NaN
    weights (a silently meaningless retained share)."""
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(3))
    m = flex_mask(w, TBS(8), 0.5)
    assert mask_quality(w, m, TBS(8), 0.5)["valid"] == 1.0
    w2, m2, d2 = change(w, m, 0.5)
    with pytest.raises(exc, match=match):
        mask_quality(w2, m2, TBS(8), d2)


@pytest.mark.parametrize("chunk, exc", [(0, ValueError), (-4, ValueError), (2.0, TypeError)])
def test_approx2_refuses_a_bad_chunk(chunk, exc):
    with pytest.raises(exc, match="chunk_tiles"):
        transposable_mask_approx2(torch.randn(8, 8), chunk_tiles=chunk)


def test_bools_and_floats_where_ints_belong_are_refused():
    """dim=True passed nm_mask's check and failed inside movedim; transposable_mask took n=2.0;
    per_tensor_magnitude_mask took density=True as 1.0."""
    from kernels.ops.nm_mask import nm_mask_reference
    from kernels.ops.transposable import transposable_mask_reference
    from repro.masked_training import per_tensor_magnitude_mask

    w = torch.randn(8, 8)
    with pytest.raises(TypeError, match="dim must be an int"):
        nm_mask_reference(w, 2, 4, dim=True)
    with pytest.raises(TypeError, match="n must be an int"):
        transposable_mask_reference(w, n=2.0)
    with pytest.raises(TypeError, match="density must be a number"):
        per_tensor_magnitude_mask(True)
    with pytest.raises(ValueError, match="density"):
        per_tensor_magnitude_mask(float("nan"))
