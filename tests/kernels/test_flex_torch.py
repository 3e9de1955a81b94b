"""The strong PyTorch baselines of FAST Fig. 3 (``kernels.ops.flex_torch``): same masks as the readable
reference with the same pivot and tie share, no host sync inside a call, traceable by
``torch.compile`` without graph breaks, capturable in a CUDA graph (GPU)."""

from __future__ import annotations

import pytest
import torch

from kernels.ops.flex import flex_mask_reference, tie_share
from kernels.ops.flex_torch import (
    TorchFlexMasker,
    compiled_masks_of_weight,
    masks_any_shape,
    masks_of_weight,
    pivot_and_tie,
    recompile_limit,
    regular_table,
)
from kernels.ops.patterns import NM, TBS, Unstructured, Vegeta
from kernels.ops.pivot import find_pivot

CUDA = torch.cuda.is_available()
PATTERNS = [TBS(4), TBS(8), Vegeta(4), Vegeta(8), NM(2, 4), Unstructured()]
SHAPES = ((64, 128), (128, 256), (32, 128))


def density_for(pattern, d: float) -> float:
    return pattern.density(pattern.configs[0]) if len(pattern.configs) == 1 and pattern.unit != 1 else d


def weights(dtype: torch.dtype, seed: int, device: str = "cpu") -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    rows = [torch.exp(torch.randn(o, 1, generator=g)) for o, _ in SHAPES]  # row scales like trained layers
    out = [0.02 * torch.randn(o, i, generator=g) * r for (o, i), r in zip(SHAPES, rows, strict=True)]
    return [w.to(dtype).to(device) for w in out]


def reference_masks(ws, pattern, d, method):
    nm = isinstance(pattern, NM)
    pivot = 0.0 if nm else find_pivot(ws, d, method="exact")
    tie = 1.0 if nm else torch.tensor(tie_share(ws, pivot, d), dtype=torch.float32).item()  # as a kernel sees it
    return [flex_mask_reference(w, pattern, d, method, 0, pivot, tie) for w in ws]


@pytest.mark.parametrize("pattern", PATTERNS, ids=str)
@pytest.mark.parametrize("method", ["torch", "vegeta"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("d", [0.3, 0.5, 0.71])
def test_equals_reference(pattern, method, dtype, d):
    d = density_for(pattern, d)
    if isinstance(pattern, NM) and d != 0.5:
        pytest.skip("2:4 fixes the density")
    seed = hash((str(pattern), method, str(dtype), d)) % 1000
    ws = weights(dtype, seed)
    got = TorchFlexMasker(ws, pattern, d, method)()
    want = reference_masks(ws, pattern, d, method)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.bool and g.shape == w.shape
        assert torch.equal(g, w)
        pattern.validate(g)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("d", [0.0, 0.25, 0.5, 1.0])
def test_pivot_and_tie_equal_host(dtype, d):
    ws = weights(dtype, 3)
    k = round(d * sum(w.numel() for w in ws))
    pivot, tie = pivot_and_tie(ws, k)
    assert pivot.dtype == tie.dtype == torch.float32 and pivot.dim() == tie.dim() == 0
    if k == 0:
        assert pivot.item() == float("inf")
        return
    host = find_pivot(ws, d, method="exact")
    assert pivot.item() == host
    assert tie.item() == torch.tensor(tie_share(ws, host, d), dtype=torch.float32).item()


def test_ties_meet_the_budget():
    """bf16 weights with many equal magnitudes: the tie share makes the budget exact."""
    ws = [torch.randint(-3, 4, (64, 128)).to(torch.bfloat16) for _ in range(2)]
    masks = TorchFlexMasker(ws, TBS(4), 0.5, "torch")()
    kept = sum(int(m.sum()) for m in masks)
    assert abs(kept - 0.5 * sum(w.numel() for w in ws)) <= 4 * len(ws)  # within one tile step per weight


class _HostSync(RuntimeError):
    pass


@pytest.fixture
def no_host_sync(monkeypatch):
    """Any read of a tensor's value on the host raises (what would sync with a GPU)."""

    def refuse(name):
        def f(*a, **k):
            raise _HostSync(f"host sync: Tensor.{name}")

        return f

    def arm():
        for name in ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__"):
            monkeypatch.setattr(torch.Tensor, name, refuse(name))

    return arm


@pytest.mark.parametrize("pattern", PATTERNS, ids=str)
@pytest.mark.parametrize("method", ["torch", "vegeta"])
def test_no_host_sync_inside_a_call(pattern, method, no_host_sync):
    d = density_for(pattern, 0.5)
    ws = weights(torch.bfloat16, 5)
    masker = TorchFlexMasker(ws, pattern, d, method)  # set-up may read values (validation)
    want = [m.clone() for m in masker()]
    no_host_sync()
    got = masker(check=False)
    with pytest.raises(_HostSync):  # the fixture is armed
        bool(torch.ones(1))
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize("pattern", [TBS(4), TBS(8), Vegeta(4), NM(2, 4)], ids=str)
@pytest.mark.parametrize("method", ["torch", "vegeta"])
def test_traces_without_graph_breaks(pattern, method):
    """fullgraph=True: dynamo sees the whole per-weight function (what compile=True relies on)."""
    torch._dynamo.reset()
    d = density_for(pattern, 0.5)
    ws = weights(torch.bfloat16, 9)[:1]
    pivot, tie = pivot_and_tie(ws, round(d * ws[0].numel()))
    table = regular_table(4, ws[0].device) if pattern == TBS(4) else None
    configs = torch.tensor(pattern.configs, dtype=torch.float32)
    fn = torch.compile(masks_of_weight, fullgraph=True, backend="eager", dynamic=False)
    got = fn(ws[0], pattern, method, configs, pivot, tie, table)
    assert torch.equal(got, masks_of_weight(ws[0], pattern, method, configs, pivot, tie, table))


def _check_any_shape(fn, shape: tuple[int, int], pattern, method: str, configs: torch.Tensor, d: float) -> None:
    """``fn`` (an any-shape graph) on a fresh bf16 weight whose dimensions are marked dynamic, as
    ``compiled_masks_of_weight`` marks them, gives the eager masks."""
    w = torch.randn(*shape).to(torch.bfloat16)
    for dim in (0, 1):
        torch._dynamo.maybe_mark_dynamic(w, dim)
    pivot, tie = pivot_and_tie([w], round(d * w.numel()))
    with recompile_limit(8):
        got = fn(w, pattern, method, configs, pivot, tie, None)
    assert torch.equal(got, masks_of_weight(w, pattern, method, configs, pivot, tie, None))


def test_tbs8_compiles_once_for_every_shape():
    """TBS(x >= 8)'s compiled baseline is one graph per method for every weight shape (its static
    graphs took about 40 s each to compile on a GPU host), and gives the eager masks."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter = CompileCounter()
    fn = masks_any_shape(counter)
    pattern, d = TBS(8), 0.5
    configs = torch.tensor(pattern.configs, dtype=torch.float32)
    for shape in ((64, 128), (128, 64), (192, 256)):
        _check_any_shape(fn, shape, pattern, "torch", configs, d)
    assert counter.frame_count == 1


def test_tbs8_any_shape_after_static_graphs():
    """The any-shape graph compiles after static graphs of other patterns and for a second method:
    with dynamo's automatic dynamic shapes, the recompile made TBS's own x symbolic and its shape
    check failed to trace (figure3 on an H200 at 47b55c9: "BUILD_STRING type error")."""
    torch._dynamo.reset()
    static = torch.compile(masks_of_weight, fullgraph=True, dynamic=False, backend="eager")
    w4 = torch.randn(64, 128).to(torch.bfloat16)
    args4 = (TBS(4), "torch", torch.tensor(TBS(4).configs, dtype=torch.float32), *pivot_and_tie([w4], 4096))
    static(w4, *args4, regular_table(4, w4.device))
    fn = masks_any_shape("eager")
    pattern = TBS(8)
    configs = torch.tensor(pattern.configs, dtype=torch.float32)
    for method, shape in (("torch", (64, 128)), ("vegeta", (128, 64)), ("torch", (192, 256))):
        _check_any_shape(fn, shape, pattern, method, configs, 0.5)


def test_compiled_masks_of_weight_picks_the_graph():
    """TBS(x >= 8) gets the shared any-shape graph; the other patterns a static compile of their own."""
    ws = [torch.randn(16, 16)]
    assert compiled_masks_of_weight(TBS(8), ws) is masks_any_shape()
    assert compiled_masks_of_weight(TBS(4), ws) is not masks_any_shape()


def test_compiled_equals_eager_inductor():
    """The compiled baseline (inductor, as figure3 times it) gives the eager masks."""
    ws = weights(torch.bfloat16, 13)[:2]
    for pattern, d in ((Vegeta(4), 0.4), (NM(2, 4), 0.5)):
        eager = TorchFlexMasker(ws, pattern, d, "torch")()
        compiled = TorchFlexMasker(ws, pattern, d, "torch", compile=True)()
        assert all(torch.equal(a, b) for a, b in zip(compiled, eager, strict=True))


def test_compiled_masker_graph_inputs(monkeypatch):
    """The compiled masker's pivot graph takes one static tensor, the weights concatenated, however
    many weights there are: over a whole model's weights as inputs, dimensions marked dynamic by the
    TBS(8) graph, it never finished compiling on an H200 (figure3's training part at a6d205f). The
    any-shape graph compiles with inductor's FX graph cache off (its key ignores size hints)."""
    real_compile = torch.compile
    seen: dict[str, list] = {}
    options: dict[str, object] = {}

    def recording_compile(fn, **kwargs):
        name = fn.__name__
        options[name] = kwargs.get("options")

        def backend(gm, example_inputs):
            seen.setdefault(name, []).append(list(example_inputs))
            return gm.forward

        kwargs = {k: v for k, v in kwargs.items() if k not in ("backend", "options")}
        return real_compile(fn, backend=backend, **kwargs)

    torch._dynamo.reset()
    masks_any_shape.cache_clear()
    monkeypatch.setattr(torch, "compile", recording_compile)
    try:
        ws = [torch.randn(64, 128).to(torch.bfloat16) for _ in range(6)]
        ws += [torch.randn(128, 64).to(torch.bfloat16) for _ in range(6)]
        got = TorchFlexMasker(ws, TBS(8), 0.5, "torch", compile=True)()
    finally:
        masks_any_shape.cache_clear()
        torch._dynamo.reset()  # no graph of the recording backend stays on these code objects
    want = TorchFlexMasker(ws, TBS(8), 0.5, "torch")()
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    [pivot_inputs] = seen["pivot_and_tie_of_flat"]
    tensors = [t for t in pivot_inputs if isinstance(t, torch.Tensor)]
    assert len(tensors) == 1 and all(isinstance(n, int) for n in tensors[0].shape)
    assert options["_masks_of_weight_any_shape"] == {"fx_graph_cache": False}


@pytest.mark.parametrize("pattern", [TBS(4), TBS(8), Vegeta(4), NM(2, 4)], ids=str)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_call_refuses_nonfinite_weights_unless_told_not_to_check(pattern, bad):
    ws = weights(torch.float32, 3)
    masker = TorchFlexMasker(ws, pattern, density_for(pattern, 0.5), "torch")
    ws[-1][1, 2] = bad  # after set-up: the masker reads the weights in place
    with pytest.raises(ValueError, match="NaN or Inf"):
        masker()
    assert len(masker(check=False)) == len(ws)  # the device-only call: no check, no host read


@pytest.mark.parametrize("change", ["data", "resize"])
def test_call_refuses_weights_replaced_after_set_up(change, no_host_sync):
    ws = [torch.nn.Parameter(w, requires_grad=False) for w in weights(torch.float32, 4)]
    masker = TorchFlexMasker(ws, TBS(4), 0.5, "torch")
    with torch.no_grad():
        ws[1].mul_(2.0)  # in place (an optimizer step): fine
    no_host_sync()
    assert len(masker(check=False)) == len(ws)  # the guard reads no device value
    ws[1].data = ws[1].data.clone() if change == "data" else ws[1].data[:-4]
    with pytest.raises(RuntimeError, match=r"weights\[1\] was replaced or resized after the TorchFlexMasker"):
        masker(check=False)


def test_the_host_sync_check_catches_the_checked_call(no_host_sync):
    masker = TorchFlexMasker(weights(torch.float32, 3), TBS(4), 0.5, "torch")
    no_host_sync()
    with pytest.raises(_HostSync):  # the default call reads the device once: its check
        masker()


def test_bad_input():
    w = torch.randn(64, 128)
    with pytest.raises(ValueError, match="baseline method"):
        TorchFlexMasker(w, TBS(4), 0.5, "fast")
    with pytest.raises(ValueError, match="density"):
        TorchFlexMasker(w, TBS(4), 1.5)
    with pytest.raises(ValueError, match="empty"):
        TorchFlexMasker([], TBS(4), 0.5)
    with pytest.raises(ValueError, match="not divisible"):
        TorchFlexMasker(torch.randn(6, 8), TBS(4), 0.5)
    with pytest.raises(TypeError):
        TorchFlexMasker(w.to(torch.int32), TBS(4), 0.5)
    with pytest.raises(ValueError, match="fixes the density"):
        TorchFlexMasker(w, NM(2, 4), 0.3)
    with pytest.raises(ValueError, match="one dtype and one device"):
        TorchFlexMasker([w, w.bfloat16()], TBS(4), 0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("pattern", PATTERNS, ids=str)
@pytest.mark.parametrize("method", ["torch", "vegeta"])
@pytest.mark.parametrize("compiled", [False, True])
def test_gpu_graph_capture_equals_reference(pattern, method, compiled):
    from repro.timing import capture_graph

    d = density_for(pattern, 0.5)
    ws = weights(torch.bfloat16, 17, "cuda")
    masker = TorchFlexMasker(ws, pattern, d, method, compile=compiled)
    out: list[torch.Tensor] = []

    def call():
        out[:] = masker(check=False)

    graph = capture_graph(call)  # raises if a call syncs with the host
    for m in out:
        m.fill_(True)  # poison: the replay must write every byte
    graph.replay()
    torch.cuda.synchronize()
    want = reference_masks([w.cpu() for w in ws], pattern, d, method)
    for g, w in zip(out, want, strict=True):
        assert torch.equal(g.cpu(), w)
