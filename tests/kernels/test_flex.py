"""FAST flex-SS mask generation: fused Triton kernels (interpreter) vs the PyTorch reference,
budgets of the three methods, unbiased density of the probabilistic choice, bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from kernels.ops._flex_triton import fast_mask_triton, has_fast_kernel
from kernels.ops.flex import bracket, choose_configs, flex_mask, flex_mask_reference, mask_quality, tile_counts
from kernels.ops.patterns import NM, TBS, Unstructured, Vegeta

KERNEL_PATTERNS = [TBS(4), TBS(8), Vegeta(4), Vegeta(8), NM(2, 4), NM(4, 8)]


def pivot_of(w: torch.Tensor, density: float) -> float:
    k = round(density * w.numel())
    return w.abs().float().flatten().topk(k).values[-1].item()


def density_for(pattern, d=0.37):
    return pattern.density(pattern.configs[0]) if len(pattern.configs) == 1 else d


@pytest.mark.parametrize("pattern", KERNEL_PATTERNS, ids=str)
def test_fast_kernel_equals_reference_fp32(pattern, monkeypatch):
    """The kernel's new output is poisoned before it writes it: every byte 0xFF (neither False nor
    True), so a byte left unwritten fails the byte check and the comparison."""
    import kernels.ops._flex_triton as ft

    real_empty = torch.empty

    def poisoned_empty(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        t = real_empty(*a, **kw)
        if t.dtype == torch.bool:
            t.view(torch.uint8).fill_(0xFF)
        return t

    monkeypatch.setattr(ft.torch, "empty", poisoned_empty)
    assert has_fast_kernel(pattern)
    w = torch.randn(16, 256)
    d = density_for(pattern)
    piv = pivot_of(w, d)
    got = fast_mask_triton(w, pattern, piv, seed=7)
    assert (got.view(torch.uint8) <= 1).all()
    ref = flex_mask_reference(w, pattern, d, "fast", 7, piv)
    assert torch.equal(got, ref)
    pattern.validate(got)


@pytest.mark.parametrize("pattern", [TBS(4), Vegeta(4)], ids=str)
def test_fast_kernel_bf16_same_configs_and_optimal(pattern):
    """bf16 has ties between layout sums: compare configurations and retained magnitude."""
    w = torch.randn(32, 128, dtype=torch.bfloat16)
    piv = pivot_of(w, 0.5)
    got = fast_mask_triton(w, pattern, piv, seed=3)
    ref = flex_mask_reference(w, pattern, 0.5, "fast", 3, piv)
    assert torch.equal(pattern.tile_configs(got), pattern.tile_configs(ref))
    mags = pattern.tiles(w.abs().double())
    kept = lambda m: (mags * pattern.tiles(m)).flatten(1).sum(1)  # noqa: E731
    assert torch.allclose(kept(got), kept(ref))


@pytest.mark.parametrize("pattern", [TBS(4), TBS(8), Vegeta(4)], ids=str)
@pytest.mark.parametrize("method", ["torch", "vegeta"])
def test_budget_methods_meet_the_target(pattern, method):
    w = torch.randn(64, 256)
    d = 0.43
    m = flex_mask(w, pattern, d, method=method, pivot=pivot_of(w, d))
    pattern.validate(m)
    gap = round(d * w.numel()) - int(m.sum())
    step = pattern.kept(max(pattern.configs))
    # largest remainder stays at or below the budget; nearest rounding + correction lands within a step
    assert (0 <= gap < step) if method == "torch" else (abs(gap) < step)


def test_bracket():
    lo, hi, p = bracket((0, 1, 2, 4), torch.tensor([0.0, 0.5, 1.0, 3.0, 4.0, 5.0]))
    assert lo.tolist() == [0, 0, 1, 2, 4, 4] and hi.tolist() == [0, 1, 1, 4, 4, 4]
    assert torch.allclose(p, torch.tensor([0.0, 0.5, 0.0, 0.5, 0.0, 0.0]))


def _kept_counts(configs_fn, counts, pattern, seeds):
    return torch.tensor([float((configs_fn(s) * pattern.unit).sum()) for s in seeds])


@pytest.mark.parametrize("pattern", [TBS(4), Vegeta(4)], ids=str)
def test_fast_density_is_unbiased_and_the_test_has_power(pattern):
    """E[kept] = sum of the tiles' counts exactly; check the mean over seeds against a 5-sigma
    bound from the exact per-tile variance, and check a biased rule fails the same bound."""
    w = torch.randn(64, 256)
    piv = pivot_of(w, 0.41)
    _, counts = tile_counts(w, pattern, piv)
    lo, hi, p = bracket(pattern.configs, counts.float() / pattern.unit)
    var = float((((hi - lo) * pattern.unit).double() ** 2 * p.double() * (1 - p.double())).sum())
    target = float(counts.sum())
    seeds = range(400)
    kept = _kept_counts(lambda s: choose_configs("fast", pattern, counts, 0, seed=s), counts, pattern, seeds)
    bound = 5 * math.sqrt(var / len(seeds))
    assert abs(kept.double().mean().item() - target) <= bound
    biased = _kept_counts(lambda s: torch.where(p > 0.4, hi, lo), counts, pattern, seeds)  # deterministic rounding
    assert abs(biased.double().mean().item() - target) > bound


def test_density_error_shrinks_with_more_tiles():
    """16x more tiles: the mean |density error| over 32 seeds falls about 4x (law of large numbers);
    fixed weights and seeds, so the test cannot fail by chance."""
    errs = []
    for rows in (16, 256):
        w = torch.randn(rows, 256, generator=torch.Generator().manual_seed(rows))
        piv = pivot_of(w, 0.5)
        e = [
            abs(mask_quality(w, flex_mask_reference(w, TBS(4), 0.5, "fast", s, piv), TBS(4), 0.5)["density_error"])
            for s in range(32)
        ]
        errs.append(sum(e) / len(e))
    assert errs[1] < errs[0] / 2


def test_unstructured_is_threshold():
    w = torch.randn(8, 8)
    piv = pivot_of(w, 0.25)
    assert torch.equal(flex_mask(w, Unstructured(), 0.25, pivot=piv), w.abs() >= piv)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"density": 1.5}, ValueError, r"\[0, 1\]"),
        ({"density": -0.1}, ValueError, r"\[0, 1\]"),
        ({"density": float("nan")}, ValueError, r"\[0, 1\]"),
        ({"density": "half"}, TypeError, "real number"),
        ({"method": "magic"}, ValueError, "unknown method"),
        ({"pattern": "TBS(4)"}, TypeError, "Pattern"),
        ({"pattern": NM(2, 4), "density": 0.3}, ValueError, "fixes the density"),
        ({"w": torch.randn(6, 8)}, ValueError, "not divisible"),
        ({"w": torch.ones(8, 8, dtype=torch.int32)}, TypeError, "dtype"),
        ({"w": torch.full((8, 8), float("nan"))}, ValueError, "NaN"),
        ({"w": torch.randn(8)}, ValueError, "2-D"),
        ({"tie": 1.5}, ValueError, r"tie must lie in \[0, 1\]"),
        ({"tie": -0.1}, ValueError, r"tie must lie in \[0, 1\]"),
        ({"tie": float("nan")}, ValueError, r"tie must lie in \[0, 1\]"),
        ({"tie": True}, TypeError, "tie must be a real number"),
        ({"tie": "0.5"}, TypeError, "tie must be a real number"),
    ],
)
def test_bad_inputs(kwargs, exc, match):
    args = {"w": torch.randn(8, 8), "pattern": TBS(4), "density": 0.5, "pivot": 0.5, **kwargs}
    with pytest.raises(exc, match=match):
        flex_mask(**args)


def test_tie_share_makes_the_budget_exact_with_ties():
    """bf16-like data: many entries equal the pivot; the tie share keeps E[kept] = k."""
    from kernels.ops.flex import tie_share

    w = torch.randint(-8, 9, (64, 256)).float()  # 17 values only: massive ties
    d = 0.5
    k = round(d * w.numel())
    piv = pivot_of(w, d)
    tie = tie_share(w, piv, d)
    assert 0.0 < tie < 1.0
    _, counts = tile_counts(w, TBS(4), piv, tie)
    assert abs(float(counts.sum()) - k) < 1e-2
    m = flex_mask(w, TBS(4), d, method="torch")  # pivot and tie from w
    assert 0 <= k - int(m.sum()) < 16
    kept = [int(flex_mask(w, TBS(4), d, method="fast", seed=s).sum()) for s in range(30)]
    assert abs(sum(kept) / len(kept) - k) < 0.01 * k
    ref = flex_mask_reference(w, TBS(4), d, "fast", 5, piv, tie)
    assert torch.equal(TBS(4).tile_configs(fast_mask_triton(w, TBS(4), piv, 5, tie)), TBS(4).tile_configs(ref))


def test_generated_tbs4_kernel_is_current():
    from kernels.ops._gen_flex_tbs4 import TARGET, render

    assert TARGET.read_text() == render(), "run: python -m kernels.ops._gen_flex_tbs4"


# ----------------------------------------------------------------------------- FlexMasker

MASKER_PATTERNS = [TBS(4), TBS(8), Vegeta(4), Vegeta(8), NM(2, 4)]


def _block(dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = ((16, 128), (8, 256), (32, 128))  # shapes every kernel pattern tiles
    # few distinct magnitudes (multiples of 1/256): the pivot is tied, so the tie share matters
    return [((torch.randn(*s, generator=g) * 8).round() / 256).to(dtype) for s in shapes]


def _expected(ws: list[torch.Tensor], pattern, d: float, seed: int) -> tuple[list[torch.Tensor], float, float]:
    from kernels.ops.pivot import find_pivot, pivot_and_tie_16bit

    if ws[0].dtype in (torch.bfloat16, torch.float16):
        piv, tie = pivot_and_tie_16bit(ws, d)
    else:
        from kernels.ops.flex import tie_share

        piv = find_pivot(ws, d)
        tie = tie_share(ws, piv, d)
    return [flex_mask(w, pattern, d, "fast", seed, piv, tie=tie) for w in ws], piv, tie


@pytest.mark.parametrize("pattern", MASKER_PATTERNS, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_masker_equals_flex_mask(pattern, dtype):
    """Device pivot + device-pointer mask kernels == host pivot + scalar-argument kernels (float32:
    the radix pivot, as a trainer's master weights take it)."""
    from kernels.ops.flex import FlexMasker

    ws = _block(dtype)
    d = density_for(pattern, 0.5)
    masker = FlexMasker(ws, pattern, d, seed=9)
    masker._mask_buffer.fill_(True)  # poisoned: its buffer starts zeroed, so unwritten False entries hid
    got = [m.clone() for m in masker()]
    want, piv, tie = _expected(ws, pattern, d, 9)
    if isinstance(pattern, NM):  # a fixed n:m pattern needs no pivot: none is computed
        assert math.isnan(masker.pivot_and_tie()[0]) and not masker._pivot_launches
    else:
        assert masker.pivot_and_tie() == (piv, torch.tensor(tie, dtype=torch.float32).item())
        assert 0.05 < tie < 0.95  # the data exercise the tie share
    assert int(masker.nonfinite) == 0
    for g_, w_ in zip(got, want, strict=True):
        assert g_.dtype == torch.bool and g_.any() and not g_.all()  # a real mask, not a constant
        assert torch.equal(g_, w_)
        pattern.validate(g_)
    for m, w_ in zip(masker.masks, want, strict=True):
        m.copy_(~w_)  # every entry wrong before the second call: each must be written again
    assert all(torch.equal(a, b) for a, b in zip(masker(), want, strict=True)), "second call differs (bins cleared?)"


def test_masker_tracks_in_place_updates_and_reseed():
    from kernels.ops.flex import FlexMasker

    ws = _block()
    masker = FlexMasker(ws, TBS(4), 0.4, seed=1)
    first = [m.clone() for m in masker()]
    with torch.no_grad():
        ws[1].mul_(3.0)  # the weights change in place (an optimizer step): the pivot moves
    got = masker()
    want, _, _ = _expected(ws, TBS(4), 0.4, 1)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(got, first, strict=True))
    masker.reseed(77)
    want, _, _ = _expected(ws, TBS(4), 0.4, 77)
    assert all(torch.equal(a, b) for a, b in zip(masker(), want, strict=True))
    kept = masker.copy_masks()  # new tensors, equal now, untouched by the next call
    assert all(torch.equal(a, b) and a.shape == b.shape for a, b in zip(kept, want, strict=True))
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(kept, masker.masks, strict=True))
    masker.reseed(78)
    masker()
    assert all(torch.equal(a, b) for a, b in zip(kept, want, strict=True))


@pytest.mark.parametrize("pattern", [TBS(4), NM(2, 4)], ids=str)
@pytest.mark.parametrize("change", ["data", "resize", "dtype"])
def test_masker_refuses_weights_replaced_after_set_up(pattern, change):
    """Before: the masker kept masking the old storage (a silent wrong answer); now the call says so."""
    from kernels.ops.flex import FlexMasker

    ws = [torch.nn.Parameter(w, requires_grad=False) for w in _block()]
    masker = FlexMasker(ws, pattern, 0.5, seed=1)
    masker()
    with torch.no_grad():
        if change == "data":
            ws[2].data = ws[2].data * 2.0  # new storage, same shape and dtype
        elif change == "resize":
            ws[2].data = ws[2].data[:-16]
        else:
            ws[2].data = ws[2].data.half()
    with pytest.raises(RuntimeError, match=r"weights\[2\] was replaced or resized after the FlexMasker"):
        masker()
    with pytest.raises(RuntimeError, match="replaced or resized"):
        masker(check=False)  # the device-only call checks too (host-only)


@pytest.mark.parametrize(
    "dtype, pattern",
    [
        (torch.float32, TBS(4)),  # radix pivot (interpreter) / host pivot (references)
        (torch.bfloat16, NM(2, 6)),  # no fused kernel and a fixed n: no pivot (_fixed_call)
        (torch.bfloat16, Unstructured()),
        (torch.float16, TBS(8)),
    ],
    ids=str,
)
def test_masker_fallback_paths(dtype, pattern, monkeypatch):
    from kernels.ops.flex import FlexMasker

    ws = [w[:, :120].contiguous() for w in _block(dtype)] if isinstance(pattern, NM) else _block(dtype)
    d = density_for(pattern, 0.45)
    for interpret in ("1", "0"):  # Triton (interpreter), then the plain-PyTorch references
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
        got = FlexMasker(ws, pattern, d, seed=4)()
        want, _, _ = _expected(ws, pattern, d, 4)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), interpret


@pytest.mark.parametrize("interpret", ["1", "0"])
def test_masker_raises_on_nonfinite(interpret, monkeypatch):
    from kernels.ops.flex import FlexMasker

    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    ws = _block()
    masker = FlexMasker(ws, TBS(4), 0.5)
    ws[2][3, 5] = float("nan")
    ws[0][0, 0] = -float("inf")
    with pytest.raises(ValueError, match="NaN or Inf"):
        masker()
    if interpret == "1":  # device path: check=False leaves the count to inspect
        masker(check=False)
        assert int(masker.nonfinite) == 2
    ws[2][3, 5] = 0.0
    ws[0][0, 0] = 0.0
    want, _, _ = _expected(ws, TBS(4), 0.5, 0)
    assert all(torch.equal(a, b) for a, b in zip(masker(), want, strict=True))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_masker_pattern_without_fused_kernel_reads_the_device_pivot(dtype):
    """A pattern with several configurations but no fused kernel (TBS(4) restricted to 0, 2, 4):
    the pivot and tie share are computed on the device, read back, and the reference masks each
    weight with them; same masks as flex_mask with the host pivot, every entry written again."""
    from kernels.ops.flex import FlexMasker

    pattern = TBS(4, configs=(0, 2, 4))
    assert not has_fast_kernel(pattern)
    ws = _block(dtype, seed=3)
    masker = FlexMasker(ws, pattern, 0.45, seed=6)
    assert masker._device_pivot and not masker._fused
    want, piv, tie = _expected(ws, pattern, 0.45, 6)
    masker._mask_buffer.fill_(True)  # poisoned
    got = masker()
    assert masker.pivot_and_tie() == (piv, torch.tensor(tie, dtype=torch.float32).item())
    for g_, w_ in zip(got, want, strict=True):
        assert g_.any() and not g_.all() and torch.equal(g_, w_)
        pattern.validate(g_)


def test_masker_fixed_nm_refuses_nonfinite_unless_unchecked():
    """A fixed n:m pattern computes no pivot, so its own scan must catch NaN/Inf weights (and name
    the weight); ``check=False`` skips that scan (the call stays device-only)."""
    from kernels.ops.flex import FlexMasker
    from kernels.ops.nm_mask import nm_mask_reference

    ws = _block(torch.float32, seed=4)
    masker = FlexMasker(ws, NM(2, 4), 0.5)
    ws[1][2, 7] = float("inf")
    with pytest.raises(ValueError, match=r"weights\[1\] contains NaN or Inf"):
        masker()
    masker(check=False)  # no scan, no error
    ws[1][2, 7] = 0.0
    for m, w in zip(masker(), ws, strict=True):
        assert torch.equal(m, nm_mask_reference(w, 2, 4, dim=1))


def test_mask_quality_flags_a_mask_that_breaks_the_pattern():
    """A mask of the right density that no TBS(8) configuration allows scores valid 0.0 (and its
    achieved density and retained share are still reported)."""
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(8))
    good = flex_mask(w, TBS(8), 0.5)
    row = good[0, :8]  # first row of the first tile: a kept and a dropped entry
    c_on, c_off = int(row.nonzero()[0]), int((~row).nonzero()[0])
    bad = good.clone()
    bad[0, c_on], bad[0, c_off] = False, True  # same count; the tile's column counts now differ
    assert int(bad.sum()) == int(good.sum())
    q = mask_quality(w, bad, TBS(8), 0.5)
    assert q["valid"] == 0.0 and mask_quality(w, good, TBS(8), 0.5)["valid"] == 1.0
    assert q["achieved_density"] == pytest.approx(float(bad.double().mean()), abs=0)
    mag = w.double().abs().flatten()
    expect = float((mag * bad.flatten()).sum() / mag.topk(round(0.5 * w.numel())).values.sum())
    assert q["retained_vs_topk"] == pytest.approx(expect, rel=1e-6)


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda ws: (ws, TBS(4), 1.5), ValueError, r"\[0, 1\]"),
        (lambda ws: (ws, TBS(4), -0.1), ValueError, r"\[0, 1\]"),
        (lambda ws: (ws, TBS(4), float("nan")), ValueError, r"\[0, 1\]"),
        (lambda ws: ([ws[0], ws[1].float()], TBS(4), 0.5), TypeError, "one dtype"),
        (lambda ws: ([w.int() for w in ws], TBS(4), 0.5), TypeError, "dtype"),
        (lambda ws: ([ws[0], ws[1].to("meta")], TBS(4), 0.5), ValueError, "device"),
        (lambda ws: ([ws[0], torch.zeros(6, 8, dtype=ws[0].dtype)], TBS(4), 0.5), ValueError, r"weights\[1\]"),
        (lambda ws: ([ws[0], ws[1].t()], TBS(4), 0.5), ValueError, "contiguous"),
        (lambda ws: ([ws[0].view(-1)], TBS(4), 0.5), ValueError, "2-D"),
        (lambda ws: ([], TBS(4), 0.5), ValueError, "empty"),
        (lambda ws: ("w", TBS(4), 0.5), TypeError, "a Tensor or a list of Tensors"),
        (lambda ws: ([torch.empty(0, 64), torch.empty(8, 0)], TBS(4), 0.5), ValueError, "all empty"),
        (lambda ws: (ws, "TBS(4)", 0.5), TypeError, "Pattern"),
        (lambda ws: (ws, NM(2, 4), 0.3), ValueError, "fixes the density"),
    ],
)
def test_masker_bad_inputs_raise_at_construction(make, exc, match):
    from kernels.ops.flex import FlexMasker

    with pytest.raises(exc, match=match):
        FlexMasker(*make(_block()))


def test_masker_bad_seed():
    from kernels.ops.flex import FlexMasker

    for seed, exc in ((-1, ValueError), (1 << 31, ValueError), (True, TypeError), (1.5, TypeError)):
        with pytest.raises(exc, match="seed"):
            FlexMasker(_block(), TBS(4), 0.5, seed=seed)


def test_launch_direct_path_and_warm_up_check(monkeypatch):
    """The direct launcher calls the compiled kernel as ``JITFunction.run`` does; a launcher that
    fails or does nothing is caught by the construction-time check (CUDA-only paths, faked here)."""
    import inspect

    from triton.runtime.jit import JITFunction

    from kernels.ops import common
    from kernels.ops.flex import FlexMasker

    src = inspect.getsource(JITFunction.run)  # the convention Launch mirrors: fails if Triton changes it
    assert "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, launch_metadata," in src
    calls = []

    class Compiled:
        function, packed_metadata = "fn", "meta"

        def run(self, *a):
            calls.append(a)

    lz = common.Launch(None, (3, 2), ("w", 1, 2.0), 4)
    lz.compiled, lz.direct = Compiled(), True
    lz(stream=17)
    assert calls == [(3, 2, 1, 17, "fn", "meta", None, None, None, "w", 1, 2.0)]
    assert lz.with_arg(1, 5).args == ("w", 5, 2.0)

    monkeypatch.setattr(common, "direct_stream", lambda device: 0)
    masker = FlexMasker(_block(), TBS(4), 0.5, seed=3)
    want, _, _ = _expected(_block(), TBS(4), 0.5, 3)
    for x in masker._pivot_launches + masker._mask_launches:
        x.compiled = Compiled()  # "runs" nothing: the poisoned outputs must give it away
    with pytest.warns(RuntimeWarning, match="direct launches disabled"):
        masker._warm_up(True)
    assert not masker.direct and not any(x.direct for x in masker._mask_launches)
    assert all(torch.equal(a, b) for a, b in zip(masker(), want, strict=True))


def test_masker_reads_weights_in_place_in_groups_and_single_tensor():
    """The histogram passes read up to MAX_TENSORS weights per launch in place (no concatenation);
    more weights take more launches; one Tensor is a block of one."""
    from kernels.ops._pivot_triton import MAX_TENSORS
    from kernels.ops.flex import FlexMasker

    ws = _block(torch.float16, seed=2)
    masker = FlexMasker(ws, Vegeta(4), 0.3, seed=6)
    assert len(masker._pivot_launches) == 2 * -(-len(ws) // MAX_TENSORS) + 1
    want, _, _ = _expected(ws, Vegeta(4), 0.3, 6)
    assert all(torch.equal(a, b) for a, b in zip(masker(), want, strict=True))
    many = [w for _ in range(3) for w in ws][: MAX_TENSORS + 3]  # two launches per pass
    masker = FlexMasker(many, TBS(4), 0.45, seed=1)
    assert len(masker._pivot_launches) == 2 * 2 + 1
    want, _, _ = _expected(many, TBS(4), 0.45, 1)
    assert all(torch.equal(a, b) for a, b in zip(masker(), want, strict=True))
    (got,) = FlexMasker(ws[1], TBS(8), 0.6, seed=2)()
    assert torch.equal(got, _expected([ws[1]], TBS(8), 0.6, 2)[0][0])


def test_warm_up_check_accepts_correct_direct_launches_float32(monkeypatch):
    """float32 weights take the radix pivot (its own counts layout): a direct launcher that does
    the right thing must pass the construction-time check (it once failed on the counts, when
    float32 took the pivot on the host)."""
    import warnings

    from kernels.ops import common
    from kernels.ops.flex import FlexMasker

    monkeypatch.setattr(common, "direct_stream", lambda device: 0)
    ws = [w.float() for w in _block()]
    masker = FlexMasker(ws, TBS(4), 0.5, seed=3)
    assert masker._device_pivot and masker._radix

    class Correct:  # a "compiled kernel" whose launcher runs the launch through Triton
        function, packed_metadata = "fn", "meta"

        def __init__(self, launch):
            self.launch = launch

        def run(self, *a):
            x = self.launch
            x.kernel[x.grid](*x.args, num_warps=x.warps)

    for x in masker._pivot_launches + masker._mask_launches:
        x.compiled = Correct(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        masker._warm_up(True)
    assert masker.direct
    want = [
        flex_mask(w, TBS(4), 0.5, "fast", 3, *masker.pivot_and_tie()[:1], tie=masker.pivot_and_tie()[1]) for w in ws
    ]
    assert all(torch.equal(a, b) for a, b in zip(masker(), want, strict=True))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_float32_masker_on_gpu_and_captured():
    """On a GPU, a MAP-NEO 460M block's shapes in float32 (a trainer's master weights): the radix
    pivot equals the exact host pivot and tie share, the masks equal flex_mask's, direct launches
    pass the warm-up check, and a CUDA graph replayed on new weights equals eager."""
    import warnings

    from kernels.ops.flex import FlexMasker, tie_share
    from kernels.ops.pivot import find_pivot

    shapes = [(1024, 1024)] * 4 + [(3072, 1024)] * 2 + [(1024, 3072)]
    g = torch.Generator().manual_seed(0)
    ws = [(0.02 * torch.randn(*s, generator=g)).cuda() for s in shapes]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        masker = FlexMasker(ws, TBS(8), 0.5, seed=3)
    assert masker._radix and masker.direct
    got = [m.clone() for m in masker()]
    piv = find_pivot(ws, 0.5)
    tie = tie_share(ws, piv, 0.5)
    assert masker.pivot_and_tie() == (piv, torch.tensor(tie, dtype=torch.float32).item())
    for w, m in zip(ws, got, strict=True):
        assert torch.equal(m, flex_mask(w, TBS(8), 0.5, "fast", 3, piv, tie=tie))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        masker(check=False)
    with torch.no_grad():
        for w in ws:
            w.mul_(torch.rand_like(w) + 0.5)  # an optimizer step, in place: the pivot moves
    for m in masker.masks:
        m.fill_(True)  # poisoned: a replay that writes nothing shows
    graph.replay()
    replayed = [m.clone() for m in masker.masks]
    assert all(torch.equal(a, b) for a, b in zip(replayed, masker(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(replayed, got, strict=True))
