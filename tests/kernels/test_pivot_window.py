"""The window pivot (kernels.ops._pivot_triton.window_pivot_launches, interpreter): bit for bit the
two-pass select (pivot, tie share, #(above), #(equal), non-finite count) where the sample's window
holds rank k and where it misses (the guarded exact passes run), k == 0, ties, NaN/Inf, more tensors
than one launch takes, bins left zeroed for the next call; FlexMasker's masks equal with either
pivot; bad buffers refused."""

from __future__ import annotations

import math

import pytest
import torch

from kernels.ops import _pivot_triton as pt

pytestmark = pytest.mark.usefixtures("one_thread")


def _two_pass(ts: list[torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    counts = torch.zeros(pt.COUNTS_LEN, dtype=torch.int64, device=ts[0].device)
    counts[: pt.HIST_LEN] = pt.hist16_counts(ts, k)
    state = torch.full((2,), float("nan"), device=ts[0].device)
    pt.select16(counts, state, k, ts[0].dtype, clear=True)
    return state, counts


def _check_equal(
    ts: list[torch.Tensor], k: int, window: int = pt.WINDOW, fuse: bool = True, pairs: bool = True, programs=None
) -> int:
    """Window pivot == two passes (state bit for bit, the three counts); bins and tickets cleared;
    the miss flag. ``fuse``: both selects in the passes' last programs (else both launched; only
    then, with an 8-key window, even sizes and ``pairs``, the pair-counting pass runs)."""
    state, counts = pt.window_pivot(
        ts, k, window, fuse_select=fuse, fuse_window_select=fuse, pairs_count=pairs, count_programs=programs
    )
    want_state, want_counts = _two_pass(ts, k)
    assert torch.equal(state.view(torch.int32), want_state.view(torch.int32)), (k, state, want_state)
    assert counts[pt.NONFINITE : pt.COUNTS_LEN].tolist() == want_counts[pt.NONFINITE :].tolist()
    assert not counts[: pt.HIST_LEN].any() and not counts[pt.SAMPLE_AT : pt.FLAG_AT].any(), "bins not cleared"
    assert not counts[pt.TICKETS_AT : pt.LO_AT].any(), "tickets not put back"
    return int(counts[pt.FLAG_AT])


def _weights(shapes: list[tuple[int, int]], dtype: torch.dtype, seed: int, rows: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for o, i in shapes:
        w = 0.02 * torch.randn(o, i, generator=g)
        if rows:  # row and column scales, as trained layers have
            w = w * (torch.rand(o, 1, generator=g) + 0.25) * (torch.rand(1, i, generator=g) + 0.5)
        out.append(w.to(dtype))
    return out


@pytest.mark.parametrize(
    ("window", "fuse"), [(8, False), (8, True), (16, True)], ids=["8-pairs", "8-fused", "16-fused"]
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [False, True], ids=["normal", "rows"])
def test_window_hits_and_equals_two_passes(dtype, rows, window, fuse):
    shapes = [(256, 256), (256, 384), (384, 256), (100, 7)]  # ragged ends, several tensors a launch
    for seed, density in ((0, 0.5), (1, 0.25), (2, 0.75)):
        ts = _weights(shapes, dtype, seed, rows)
        n = sum(t.numel() for t in ts)
        missed = _check_equal(ts, round(density * n), window, fuse=fuse)
        # bf16 keys are 8x wider than fp16's: at this small size only bf16's 16-key window is sure to hit
        sure = dtype == torch.bfloat16 and window == 16
        assert not (missed and sure), "the sample's window should hold rank k here"


@pytest.mark.parametrize("fuse_select", [True, False], ids=["select-in-last-program", "select-launches"])
def test_window_miss_runs_the_exact_passes(fuse_select):
    """A sample unlike the rest (large values exactly where the sample reads): the window misses,
    the guarded passes run, and the result is still exact, with the selects in the passes' last
    programs (tickets) or launched on their own."""
    span = pt.BLOCK * pt.WINDOW_SAMPLE  # the values one block of the sample's passes spans
    x = torch.full((2 * span,), 0.001)
    r = torch.arange(2 * pt.BLOCK)
    spans = r // 16  # sector s % WINDOW_SAMPLE of every 16 * WINDOW_SAMPLE-value span s
    sampled = spans * 16 * pt.WINDOW_SAMPLE + (spans % pt.WINDOW_SAMPLE) * 16 + r % 16
    x[sampled] = 5.0
    x += 1e-4 * torch.rand(x.shape, generator=torch.Generator().manual_seed(3))
    x = x.to(torch.bfloat16)
    assert _check_equal([x], x.numel() // 2, fuse=fuse_select) == 1


def test_selects_fold_into_the_passes():
    """With one launch's worth of tensors the two selects run in the passes' last programs: two
    launches fewer; with more tensors than one launch takes, they launch on their own."""
    x = torch.randn(4096).to(torch.bfloat16).view(torch.int16)
    counts, state = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64), torch.zeros(2)
    fused = pt.window_pivot_launches([x], counts, state, 10, torch.bfloat16, fuse_window_select=True)
    apart = pt.window_pivot_launches([x], counts, state, 10, torch.bfloat16, fuse_select=False)
    default = pt.window_pivot_launches([x], counts, state, 10, torch.bfloat16)
    assert len(apart) - len(fused) == 2 and len(default) == len(fused) + 1
    many = pt.window_pivot_launches([x] * (pt.MAX_TENSORS + 1), counts, state, 10, torch.bfloat16)
    assert len(many) == 2 * 2 + 2 + 1 + 2 * 2 + 1


@pytest.mark.parametrize("pairs", [True, False], ids=["pairs", "values"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_window_edge_cases(dtype, pairs):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(50_000, generator=g).to(dtype)
    for k in (0, 1, 2, x.numel() - 1, x.numel()):
        _check_equal([x], k, fuse=False, pairs=pairs)
    state, _ = pt.window_pivot([x], 0)
    assert state.tolist() == [math.inf, 1.0]
    tied = ((torch.randn(60_000, generator=g) * 4).round() / 4).to(dtype)  # few distinct values
    zeros = torch.zeros(40_000, dtype=dtype)
    for ts in ([tied], [zeros], [tied, zeros]):
        n = sum(t.numel() for t in ts)
        for density in (0.1, 0.5, 0.9):
            _check_equal(ts, round(density * n), fuse=False, pairs=pairs)
    bad = x.clone()
    bad[[7, 99, 40_000]] = torch.tensor([float("nan"), float("inf"), -float("inf")], dtype=dtype)
    _check_equal([bad], 25_000, fuse=False, pairs=pairs)
    _, counts = pt.window_pivot([bad], 25_000, fuse_select=False, pairs_count=pairs)
    assert int(counts[pt.NONFINITE]) == 3


def test_pair_counting_flushes_and_picks_its_tensors():
    """The pair-counting pass over many blocks a program (its 4-bit fields flushed every 7 blocks,
    up to 126 blocks a program), with padding in the window's bin 0 (lo == 0) or below it; odd
    sizes count with the one-value kernel."""
    g = torch.Generator().manual_seed(11)
    long = (0.02 * torch.randn(2 * 2048 * 130 + 6, generator=g)).to(torch.bfloat16)  # 131 blocks of words
    tied = ((torch.randn(2048 * 40, generator=g) * 3).round() / 3).to(torch.bfloat16)
    small = torch.zeros(3000, dtype=torch.bfloat16)  # a window at key 0: padding lands in its bin 0
    for ts in ([long], [tied, long], [small, tied]):
        n = sum(t.numel() for t in ts)
        for density in (0.3, 0.5, 0.95):
            missed = _check_equal(ts, round(density * n), fuse=False, programs=1)
            assert not (missed and len(ts) == 1 and ts[0] is long), "a smooth weight's window should hold rank k"
    assert _check_equal([small], 1500, fuse=False) == 0
    counts, state = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64), torch.zeros(2)
    even = [long.view(torch.int16)]
    kernels = [x[0] for x in pt.window_pivot_launches(even, counts, state, 10, torch.bfloat16)]
    assert pt._window_pairs_kernel in kernels and pt._window_kernel not in kernels
    odd = [long.view(torch.int16), long.view(torch.int16)[1:]]  # odd size, and a start 2 bytes in
    kernels = [x[0] for x in pt.window_pivot_launches(odd, counts, state, 10, torch.bfloat16)]
    assert pt._window_kernel in kernels and pt._window_pairs_kernel not in kernels
    _check_equal([long[1:]], 1000, fuse=False)


def test_window_many_tensors_and_repeat():
    """More tensors than one launch takes (groups), and a second call on the cleared bins."""
    ts = _weights([(64, 96)] * (pt.MAX_TENSORS + 3), torch.bfloat16, 7, True)
    n = sum(t.numel() for t in ts)
    flats = [t.reshape(-1).view(torch.int16) for t in ts]
    counts = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64)
    state = torch.zeros(2)
    launches = pt.window_pivot_launches(flats, counts, state, n // 3, torch.bfloat16)
    want, _ = _two_pass(ts, n // 3)
    for _ in range(2):
        state.fill_(float("nan"))
        for kernel, grid, args, warps in launches:
            kernel[grid](*args, num_warps=warps)
        assert torch.equal(state.view(torch.int32), want.view(torch.int32))


def test_flexmasker_masks_equal_with_either_pivot(monkeypatch):
    from kernels.ops.flex import FlexMasker
    from kernels.ops.patterns import TBS, Unstructured, Vegeta

    ws = _weights([(256, 256), (256, 512)], torch.bfloat16, 9, True)
    for pattern in (TBS(4), Vegeta(4), Unstructured()):
        monkeypatch.setattr(pt, "WINDOW_MIN_VALUES", 1 << 40)
        two = [m.clone() for m in FlexMasker(ws, pattern, 0.5, seed=1)()]
        monkeypatch.setattr(pt, "WINDOW_MIN_VALUES", 0)
        masker = FlexMasker(ws, pattern, 0.5, seed=1)
        assert len(masker._pivot_launches) > 3, "the window pivot was not used"
        for a, b in zip(masker(), two, strict=True):
            assert torch.equal(a, b), pattern


def test_window_refuses_bad_buffers():
    x = torch.randn(5000).to(torch.bfloat16).view(torch.int16)
    ok_counts, ok_state = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64), torch.zeros(2)
    with pytest.raises(ValueError, match="counts"):
        pt.window_pivot_launches([x], torch.zeros(pt.COUNTS_LEN, dtype=torch.int64), ok_state, 10, torch.bfloat16)
    with pytest.raises(ValueError, match="state"):
        pt.window_pivot_launches([x], ok_counts, torch.zeros(2, dtype=torch.float64), 10, torch.bfloat16)
    with pytest.raises(TypeError, match="bf16 or fp16"):
        pt.window_pivot_launches([x], ok_counts, ok_state, 10, torch.float32)
    with pytest.raises(ValueError, match="no values"):
        pt.window_pivot_launches([x[:0]], ok_counts, ok_state, 0, torch.bfloat16)
    with pytest.raises(ValueError, match="window"):
        pt.window_pivot_launches([x], ok_counts, ok_state, 10, torch.bfloat16, window=12)
    with pytest.raises(ValueError, match="sample"):
        pt.hist16_launch([x], ok_counts, 10, 1, sample=3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_window_pivot_on_gpu_and_captured(monkeypatch):
    """On a GPU, at a MAP-NEO 460M block's shapes: window pivot == two passes, FlexMasker's masks
    equal with either pivot, and a CUDA graph of FlexMasker replayed on new weights == eager."""
    from kernels.ops.flex import FlexMasker
    from kernels.ops.patterns import TBS

    shapes = [(1024, 1024)] * 4 + [(3072, 1024)] * 2 + [(1024, 3072)]
    for seed, rows in ((0, False), (1, True)):
        ws = [w.cuda() for w in _weights(shapes, torch.bfloat16, seed, rows)]
        n = sum(w.numel() for w in ws)
        for density in (0.25, 0.5):
            k = round(density * n)
            state, counts = pt.window_pivot(ws, k)
            want, want_counts = _two_pass(ws, k)
            assert torch.equal(state.view(torch.int32), want.view(torch.int32))
            assert counts[pt.NONFINITE : pt.COUNTS_LEN].tolist() == want_counts[pt.NONFINITE :].tolist()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # direct launches must give Triton's results (they poison outputs only)
        masker = FlexMasker(ws, TBS(4), 0.5, seed=3)
    assert masker.direct and n >= pt.WINDOW_MIN_VALUES and len(masker._pivot_launches) > 3
    monkeypatch.setattr(pt, "WINDOW_MIN_VALUES", 1 << 40)
    two = FlexMasker(ws, TBS(4), 0.5, seed=3)
    for a, b in zip(masker(), two(), strict=True):
        assert torch.equal(a, b)
    graph = torch.cuda.CUDAGraph()
    masker(check=False)
    with torch.cuda.graph(graph):
        masker(check=False)
    for w, fresh in zip(ws, _weights(shapes, torch.bfloat16, 7, True), strict=True):
        w.copy_(fresh)
    for m in masker.masks:
        m.fill_(True)  # poisoned: a replay that writes nothing shows
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(masker.masks, two(), strict=True):
        assert torch.equal(a, b)
