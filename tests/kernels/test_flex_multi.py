"""One mask launch over several weights (kernels.ops._flex_triton.multi_mask_launches, interpreter):
the same masks, bit for bit, as each weight's own launch, for every fused pattern, weights of
different shapes, more weights than one launch takes, an unaligned weight (its own launch), and
through FlexMasker (one buffer of masks, one launch for a block)."""

from __future__ import annotations

import pytest
import torch

from kernels.ops import _flex_triton as ft
from kernels.ops._multi_triton import MULTI_SLOTS, PAST, multi_scalars
from kernels.ops.flex import NM, TBS, FlexMasker, Vegeta

pytestmark = pytest.mark.usefixtures("one_thread")

PATTERNS = [TBS(4), TBS(8), Vegeta(4), Vegeta(8), NM(2, 4)]


def _weights(shapes: list[tuple[int, int]], seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for o, i in shapes:
        w = torch.randn(o, i, generator=g) * (torch.rand(o, 1, generator=g) + 0.25)
        out.append(w.to(torch.bfloat16))
    return out


def _buffer(shapes: list[tuple[int, int]]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One bool buffer, poisoned, and 16-aligned mask views into it."""
    ends = [0]
    for o, i in shapes:
        ends.append(ends[-1] + -(-o * i // 16) * 16)
    base = torch.ones(ends[-1], dtype=torch.bool)
    return base, [base[a : a + o * i].view(o, i) for a, (o, i) in zip(ends, shapes, strict=False)]


def _run(launches: list) -> None:
    for kernel, grid, args, warps in launches:
        kernel[grid](*args, num_warps=warps)


def _own(ws: list[torch.Tensor], pattern, state: torch.Tensor, seed: int) -> list[torch.Tensor]:
    """Each weight's own launch (the reference of the multi launch)."""
    outs = [torch.ones(w.shape, dtype=torch.bool) for w in ws]
    _run([ft.mask_launch(w, o, pattern, state, seed) for w, o in zip(ws, outs, strict=True)])
    return outs


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.name)
def test_multi_equals_own_launches(pattern) -> None:
    """Weights of different row counts in one launch: each weight's own masks."""
    # TBS(8)'s selection is slow in the interpreter: a quarter of the rows (still three weights)
    quarter = pattern.name.startswith("TBS(8")
    shapes = [(16, 128), (32, 128), (8, 128)] if quarter else [(64, 128), (128, 128), (32, 128)]
    ws = _weights(shapes, seed=1)
    state = torch.tensor([0.6, 0.5])  # pivot, tie share
    base, outs = _buffer(shapes)
    launches = ft.multi_mask_launches(ws, outs, base, pattern, state, seed=7)
    assert len(launches) == 1 and len(launches[0][1]) == 1, "one 1-D launch for three aligned weights"
    _run(launches)
    for got, want in zip(outs, _own(ws, pattern, state, 7), strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("pattern", [TBS(4), Vegeta(4), NM(2, 4)], ids=lambda p: p.name)
def test_weights_of_other_tile_constants_run_apart(pattern) -> None:
    """Weights whose launches differ in a constexpr (tiles per program, from the column count)
    split into runs of consecutive weights; the masks are still each weight's own."""
    shapes = [(64, 128), (64, 128), (64, 256), (128, 64), (64, 128)]
    ws = _weights(shapes, seed=6)
    state = torch.tensor([0.8, 0.75])
    base, outs = _buffer(shapes)
    launches = ft.multi_mask_launches(ws, outs, base, pattern, state, seed=5)
    assert 1 < len(launches) < len(shapes)
    _run(launches)
    for got, want in zip(outs, _own(ws, pattern, state, 5), strict=True):
        assert torch.equal(got, want)


def test_more_weights_than_slots_and_an_unaligned_one() -> None:
    pattern = TBS(4)
    shapes = [(16, 64)] * (MULTI_SLOTS + 2)
    ws = _weights(shapes, seed=2)
    big = torch.randn(16 * 64 + 8).to(torch.bfloat16)
    ws[3] = big[8:].view(16, 64)  # contiguous, but 8 elements off alignment: its own launch
    state = torch.tensor([0.7, 0.25])
    base, outs = _buffer(shapes)
    launches = ft.multi_mask_launches(ws, outs, base, pattern, state, seed=3)
    assert sorted(len(g) for _, g, _, _ in launches) == [1, 1, 2], "8 + 1 weights in two runs, one alone"
    _run(launches)
    for got, want in zip(outs, _own(ws, pattern, state, 3), strict=True):
        assert torch.equal(got, want)


def test_masks_outside_the_buffer_refused_or_launched_alone() -> None:
    ws = _weights([(16, 64), (16, 64)], seed=4)
    base, outs = _buffer([(16, 64), (16, 64)])
    state = torch.tensor([0.5, 1.0])
    stray = torch.ones(16, 64, dtype=torch.bool)  # not in the buffer: its own launch
    launches = ft.multi_mask_launches(ws, [outs[0], stray], base, TBS(4), state, seed=0)
    assert len(launches) == 2
    _run(launches)
    for got, want in zip([outs[0], stray], _own(ws, TBS(4), state, 0), strict=True):
        assert torch.equal(got, want)
    with pytest.raises(ValueError, match="bool buffer"):
        ft.multi_mask_launches(ws, outs, base.view(torch.int8), TBS(4), state, seed=0)
    with pytest.raises(ValueError, match="2 weights but 1 masks"):
        ft.multi_mask_launches(ws, outs[:1], base, TBS(4), state, seed=0)


def test_slot_scalars() -> None:
    got = multi_scalars([0, 6], [64, 128], [0, 256])
    assert got[:7] == (6, *[PAST] * 6) and got[7:9] == (64, 128) and got[15:17] == (0, 256)
    with pytest.raises(ValueError, match="1..8 weights"):
        multi_scalars([], [], [])
    with pytest.raises(ValueError, match="the first at program 0"):
        multi_scalars([1], [64], [0])


@pytest.mark.parametrize("pattern", [TBS(4), Vegeta(4), NM(2, 4)], ids=lambda p: p.name)
def test_flex_masker_one_launch_same_masks(pattern) -> None:
    """FlexMasker keeps its masks in one buffer and launches once for a block; the masks equal
    ``flex_mask`` with the masker's pivot, weight by weight."""
    from kernels.ops.flex import flex_mask

    ws = _weights([(64, 128), (128, 128), (64, 128), (32, 128)], seed=5)
    masker = FlexMasker(ws, pattern, 0.5, seed=11)
    assert len(masker._mask_launches) == 1
    masks = masker()
    pivot, tie = masker.pivot_and_tie()
    fixed = isinstance(pattern, NM)  # n:m needs no pivot (the masker's state holds NaN)
    for w, m in zip(ws, masks, strict=True):
        want = (
            flex_mask(w, pattern, 0.5, "fast", 11) if fixed else flex_mask(w, pattern, 0.5, "fast", 11, pivot, tie=tie)
        )
        assert torch.equal(m, want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("pattern", [TBS(4), TBS(8), Vegeta(4), Vegeta(8), NM(2, 4)], ids=lambda p: p.name)
def test_flex_masker_chained_and_captured_on_gpu(pattern) -> None:
    """On a GPU at a MAP-NEO 460M block's shapes: FlexMasker with chained launches (PDL, where
    supported) and without give the masks of ``flex_mask`` weight by weight, eagerly and from a
    CUDA graph replayed on new weights; direct launches stay on."""
    from kernels.ops.flex import flex_mask

    shapes = [(1024, 1024)] * 4 + [(3072, 1024)] * 2 + [(1024, 3072)]
    ws = [w.cuda() for w in _weights(shapes, seed=8)]
    fixed = isinstance(pattern, NM)
    for pdl in (True, False):
        masker = FlexMasker(ws, pattern, 0.5, seed=3, pdl=pdl)
        assert masker.direct, "direct launches were switched off"
        assert len(masker._mask_launches) < len(ws), "no multi launch"
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            masker(check=False)
        for step in range(2):
            if step:
                with torch.no_grad():
                    for w in ws:
                        w.mul_(torch.rand_like(w).add_(0.5))
            for m in masker.masks:
                m.fill_(True)
            graph.replay()
            torch.cuda.synchronize()
            got = [m.clone() for m in masker.masks]
            eager = [m.clone() for m in masker()]
            pivot, tie = masker.pivot_and_tie()
            for w, g, e in zip(ws, got, eager, strict=True):
                want = (
                    flex_mask(w, pattern, 0.5, "fast", 3)
                    if fixed
                    else flex_mask(w, pattern, 0.5, "fast", 3, pivot, tie=tie)
                )
                assert torch.equal(g, want) and torch.equal(e, want), (pdl, step)


def test_large_blocks_launch_per_weight(monkeypatch) -> None:
    """From MULTI_MAX_VALUES values FlexMasker launches one mask kernel per weight: same masks."""
    ws = _weights([(64, 128), (128, 128)], seed=12)
    want = [m.clone() for m in FlexMasker(ws, TBS(4), 0.5, seed=2)()]
    monkeypatch.setattr(ft, "MULTI_MAX_VALUES", 0)
    masker = FlexMasker(ws, TBS(4), 0.5, seed=2)
    assert len(masker._mask_launches) == 2
    for got, w in zip(masker(), want, strict=True):
        assert torch.equal(got, w)


def test_chained_launch_arguments() -> None:
    """``common.chained`` sets the PDL flag, the last parameter of every kernel of the chain, whether
    the launch's arguments list it or leave it to its default; a kernel without one is refused.
    Off a CUDA GPU of compute capability 9.0 (and under the interpreter) nothing chains."""
    from kernels.ops import _pivot_triton as pt
    from kernels.ops import common
    from kernels.ops._chain_triton import pdl_supported

    x = torch.randn(4096).to(torch.bfloat16)
    counts, state = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64), torch.zeros(2)
    launches = pt.window_pivot_launches([x.view(torch.int16)], counts, state, 10, torch.bfloat16, fuse_select=False)
    launches += ft.multi_mask_launches(
        [x.view(64, 64)], [torch.zeros(64, 64, dtype=torch.bool)], *_buffer([(64, 64)])[:1], TBS(4), state, 0
    )
    for kernel, _, args, _ in launches:
        assert len(args) == len(kernel.arg_names) and args[-1] == 0, "PDL off, and given: direct launches need it"
        got = common.chained(kernel, args, 3)
        assert len(got) == len(kernel.arg_names) and got[-1] == 3 and got[:-1] == args[:-1]
        assert common.chained(kernel, args[:-1], 1)[-1] == 1  # a trailing default left out
    chain = common.chain(launches)
    assert [x.args[-1] for x in chain] == [2] + [3] * (len(launches) - 2) + [1]  # TRIGGER, both, WAIT
    assert [x.pdl for x in chain] == [False] + [True] * (len(launches) - 1)
    assert [x.args[-1] for x in common.chain(launches[:1])] == [0] and not common.chain(launches[:1])[0].pdl
    with pytest.raises(ValueError, match="no PDL flag"):
        common.chained(ft._tile_uniforms_kernel, (state, 0, 1, 1024), 1)
    assert not pdl_supported(torch.device("cpu"))
    assert not FlexMasker(_weights([(16, 64)], 0), TBS(4), 0.5).pdl
