"""The float32 window pivot's launches compile for sm_90 on the CPU (ptxas ships with Triton).

Why: the interpreter runs a kernel as NumPy and does not check what the compiler does, such as
the types of a variable that branches redefine; session 38's first GPU run of this pivot failed
to compile (``block_slot``'s size slot int64 in one branch, int32 in the others) after every
interpreter test had passed. Each distinct kernel specialisation of
``f32_window_pivot_launches`` is compiled here exactly as launched (its argument types)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

_POINTER = {
    torch.float32: "*fp32",
    torch.int32: "*i32",
    torch.int16: "*i16",
    torch.int64: "*i64",
}


def _compile_for_sm90(kernel, args: tuple, warps: int) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig, constexprs = {}, {}
    for i, p in enumerate(kernel.params):
        a = args[i] if i < len(args) else p.default
        if p.is_constexpr:
            sig[p.name], constexprs[(i,)] = "constexpr", a
        elif isinstance(a, torch.Tensor):
            sig[p.name] = _POINTER[a.dtype]
        elif isinstance(a, bool):
            sig[p.name] = "i1"
        else:
            sig[p.name] = "i32" if -(2**31) <= int(a) < 2**31 else "i64"
    src = ASTSource(kernel, sig, constexprs=constexprs)
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


def _compile_every_launch() -> int:
    """Compile each distinct specialisation; returns how many."""
    from kernels.ops import _pivot_f32_triton as pf

    flats = [torch.zeros(s) for s in [3_000_000] + [1_000_000] * 8]  # two launch groups
    n = sum(f.numel() for f in flats)
    counts = torch.zeros(pf.F32_WINDOW_COUNTS_LEN, dtype=torch.int64)
    compact, state = torch.empty(pf.compact_capacity(n)), torch.zeros(2)
    seen = set()
    for kernel, _, args, warps in pf.f32_window_pivot_launches(flats, counts, compact, state, n // 2):
        key = (kernel.fn.__name__, tuple(a for a, p in zip(args, kernel.params, strict=False) if p.is_constexpr))
        if key not in seen:
            seen.add(key)
            _compile_for_sm90(kernel, args, warps)
    return len(seen)


def test_every_launch_compiles_for_sm90():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    # sample passes (3), compaction, hit, radix passes 1..4 in two modes, select
    assert run.stdout.split()[-1] == "14", run.stdout


if __name__ == "__main__":
    print("compiled", _compile_every_launch())
