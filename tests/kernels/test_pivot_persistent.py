"""kernels.ops._pivot_persistent_triton: the window pivot in one persistent launch, against the
window pivot's six launches (``_pivot_triton.window_pivot``) and the exact select. Under the
interpreter its phases run as separate launches; the fused launch (grid barriers) runs on a GPU,
and compiles for sm_90 here."""

from __future__ import annotations

import pytest
import torch

from kernels.ops import _pivot_persistent_triton as pp
from kernels.ops import _pivot_triton as pt
from kernels.ops.pivot import pivot_and_tie_16bit_reference

INFO = slice(pt.NONFINITE, pt.COUNTS_LEN)  # #(non-finite), #(> pivot), #(== pivot)


def _missing_sample(n_rows: int = 512) -> torch.Tensor:
    """bf16 whose sampled sectors (the first 16 of every 512 values) are 100 and the rest small:
    the sample places the window far from rank k, so the exact passes must run."""
    t = (torch.rand(n_rows, 512, generator=torch.Generator().manual_seed(1)) * 0.01).to(torch.bfloat16)
    t.view(-1, 512)[:, :16] = 100.0
    return t


def _sample_hits() -> list[torch.Tensor]:
    """Two tensors whose 512-value chunks each repeat one value: the sample (16 of every 512) then
    has the whole's distribution, and the window holds rank k (the counting pass decides)."""
    g = torch.Generator().manual_seed(2)
    a = torch.randn(300, generator=g)[:, None].expand(300, 512).reshape(-1)
    b = 2 * torch.randn(200, generator=g)[:, None].expand(200, 512).reshape(-1)
    return [a.to(torch.bfloat16), b.to(torch.bfloat16)]


def _cases() -> dict[str, list[torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    inf = torch.randn(256, 256, generator=g).to(torch.bfloat16)
    inf[3, 5] = float("inf")
    return {
        "two bf16": [
            torch.randn(128, 384, generator=g).to(torch.bfloat16),
            3 * torch.randn(64, 512, generator=g).to(torch.bfloat16),
        ],
        "fp16": [torch.randn(150, 200, generator=g).to(torch.float16)],
        "ties": [torch.randint(0, 3, (128, 256), generator=g).to(torch.bfloat16)],
        "sample misses": [_missing_sample()],
        "sample hits": _sample_hits(),
        "non-finite": [inf],
    }  # fmt: skip


def _run(ts, k, counts, state, sync, **kw):
    flats = [t.reshape(-1).view(torch.int16) for t in ts]
    for kernel, grid, args, warps in pp.window_pivot_persistent_launches(
        flats, counts, state, sync, k, ts[0].dtype, **kw
    ):
        kernel[grid](*args, num_warps=warps)


CASES = [("two bf16", 0.5), ("fp16", 0.3), ("ties", 0.5), ("sample misses", 0.5), ("non-finite", 0.25)]
CASES += [("sample hits", d) for d in (0.5, 0.3, 0.8)]


@pytest.mark.parametrize(("name", "density"), CASES)
def test_phases_equal_the_window_pivot(name, density):
    ts = _cases()[name]
    n = sum(t.numel() for t in ts)
    k = round(density * n)
    want_state, want_counts = pt.window_pivot(ts, k)
    path = {"sample hits": 0, "sample misses": 1, "non-finite": 1}  # 1: the window missed
    assert int(want_counts[pt.FLAG_AT]) == path.get(name, int(want_counts[pt.FLAG_AT]))
    state, counts = pp.window_pivot_persistent(ts, k, programs=5)
    assert torch.equal(state.view(torch.int32), want_state.view(torch.int32)), (state, want_state)
    assert torch.equal(counts[INFO], want_counts[INFO])
    if name != "non-finite":
        assert (state[0].item(), pytest.approx(state[1].item())) == pivot_and_tie_16bit_reference(ts, density)


def test_buffers_are_left_zeroed_for_the_next_call():
    ts = _cases()["sample hits"] + _cases()["ties"]
    counts = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64)
    sync = torch.zeros(pp.SYNC_LEN, dtype=torch.int64)
    state = torch.full((2,), float("nan"))
    misses = _cases()["sample misses"]
    runs = [(ts, d) for d in (0.0, 1.0, 0.4)] + [(misses, 0.5), (ts, 0.4)]  # k = 0: +inf; k = n: all
    for ts, density in runs:
        k = round(density * sum(t.numel() for t in ts))
        counts[pt.LO_AT] = 12345  # poisoned: the call writes it
        _run(ts, k, counts, state, sync, programs=3)
        want_state, want_counts = pt.window_pivot(ts, k)
        assert torch.equal(state.view(torch.int32), want_state.view(torch.int32)), density
        assert torch.equal(counts[INFO], want_counts[INFO]), density
        rest = counts.clone()
        rest[INFO] = 0
        rest[pt.LO_AT] = 0
        assert not rest.any() and not sync.any(), density
        assert counts[pt.LO_AT] != 12345


def test_bad_input_is_refused():
    dev = torch.device("cpu")
    counts = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64)
    sync = torch.zeros(pp.SYNC_LEN, dtype=torch.int64)
    state = torch.zeros(2)
    even = torch.zeros(64, dtype=torch.bfloat16).view(torch.int16)
    with pytest.raises(ValueError, match="int32 words"):
        pp.window_pivot_persistent_launches(
            [torch.zeros(63, dtype=torch.int16)], counts, state, sync, 3, torch.bfloat16
        )
    with pytest.raises(ValueError, match="1..8"):
        pp.window_pivot_persistent_launches([even] * 9, counts, state, sync, 3, torch.bfloat16)
    with pytest.raises(TypeError, match="bf16 or fp16"):
        pp.window_pivot_persistent_launches([even], counts, state, sync, 3, torch.float32)
    with pytest.raises(ValueError, match="sync"):
        pp.window_pivot_persistent_launches([even], counts, state, torch.zeros(1, dtype=torch.int64), 3, torch.bfloat16)
    with pytest.raises(ValueError, match="counts"):
        pp.window_pivot_persistent_launches([even], counts[:10], state, sync, 3, torch.bfloat16)
    assert pp.persistent_programs(dev) == 132
    with pytest.raises(RuntimeError, match="timed out"):
        pp.check_sync(torch.tensor([0, 0, 1]))


_COMPILE = """
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.ops import _pivot_persistent_triton as pp
from kernels.ops import _pivot_triton as pt

k = pp._window_pivot_persistent_kernel
consts = {"INF_KEY": 0x7F80, "BLOCK": pt.BLOCK, "SAMPLE": pt.WINDOW_SAMPLE, "IS_BF16": True, "PHASE": 0, "PDL": 1}
sig = {}
for a in k.arg_names:
    if a in consts:
        sig[a] = "constexpr"
    elif a in ("counts_ptr", "sync_ptr"):
        sig[a] = "*i64"
    elif a == "state_ptr":
        sig[a] = "*fp32"
    elif a[0] == "w" and a[1:].isdigit():
        sig[a] = "*i32"
    elif (a[0] == "x" and a[1:].isdigit()) or a.startswith("sx"):
        sig[a] = "*i16"
    else:
        sig[a] = "i32"
src = ASTSource(k, sig, constexprs={(k.arg_names.index(a),): v for a, v in consts.items()})
try:
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
except Exception as e:
    if "ptxas" in str(e).lower():
        print("NO PTXAS", e)
        sys.exit(0)
    raise
print("MEMBAR" in compiled.asm.get("sass", "MEMBAR"))
"""


def test_fused_launch_compiles_for_sm90():
    """The fused launch (PHASE 0: grid barriers) never runs under the interpreter; compiling it for
    sm_90 here (a subprocess without the interpreter) catches what the interpreter lets through:
    non-constexpr globals, loop-carried types."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "TRITON_INTERPRET": "0"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _COMPILE], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    if done.stdout.startswith("NO PTXAS"):
        pytest.skip(done.stdout.strip())
    assert done.stdout.strip().endswith("True")  # the barrier's release/acquire fences are there


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["two bf16", "sample misses", "non-finite"])
def test_fused_launch_on_gpu_equals_the_window_pivot(name):
    ts = [t.cuda() for t in _cases()[name]]
    big = [torch.randn(4096, 3328, device="cuda", dtype=torch.bfloat16) * torch.rand(4096, 1, device="cuda", dtype=torch.bfloat16)]
    for group in (ts, big + ts if name == "two bf16" else ts):
        n = sum(t.numel() for t in group)
        k = round(0.5 * n)
        want_state, want_counts = pt.window_pivot(group, k)
        counts = torch.zeros(pt.WINDOW_COUNTS_LEN, dtype=torch.int64, device="cuda")
        sync = torch.zeros(pp.SYNC_LEN, dtype=torch.int64, device="cuda")
        state = torch.full((2,), float("nan"), device="cuda")
        launches = pp.window_pivot_persistent_launches(
            [t.reshape(-1).view(torch.int16) for t in group], counts, state, sync, k, group[0].dtype
        )
        assert len(launches) == 1
        graph = torch.cuda.CUDAGraph()
        kernel, grid, args, warps = launches[0]
        kernel[grid](*args, num_warps=warps)  # compile outside the capture
        with torch.cuda.graph(graph):
            kernel[grid](*args, num_warps=warps)
        for _ in range(3):  # replays reuse the buffers
            state.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            pp.check_sync(sync)
            assert torch.equal(state.view(torch.int32), want_state.view(torch.int32)), name
            assert torch.equal(counts[INFO], want_counts[INFO]), name
