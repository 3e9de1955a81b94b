# ruff: noqa: E501
"""Probe (not a suite): how much of fst's own memory-bound work (this step's weight repack, the
MVUE pack of dY) hides behind compute-bound work when it runs on a second stream inside the same
CUDA graph. For each pair (main work, side work): device time of each alone, of both in series,
and of both with the side work forked onto another stream; hidden = (serial - overlapped) / side.

Shapes: a GPT-2 block at d=2048, n=2048, N=8 (figure6's borderline cells) and GPT-2 774M at N=23."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from kernels.ops.mvue import mvue24_seed_tensor  # noqa: E402
from kernels.ops.sparse_gemm import cslt_mm_packed, pack_mvue_t_operand, pack_pair_operands, refresh_pair_operands  # noqa: E402
from kernels.ops.transposable import transposable_mask  # noqa: E402
from repro.models.gpt2 import GPT2Block, GPT2Config  # noqa: E402
from repro.timing import time_gpu  # noqa: E402

dev = torch.device("cuda")
BF = torch.bfloat16
torch.manual_seed(0)


def pair_for(out_f: int, in_f: int):
    w = torch.randn(out_f, in_f, device=dev) * 0.02
    m = transposable_mask(w)
    pair = pack_pair_operands(w, m, BF)
    pruned = torch.empty(out_f, in_f // 2, dtype=BF, device=dev)
    return w, m, pair, pruned


def forked(main, side_work, side: torch.cuda.Stream):
    def call() -> None:
        cur = torch.cuda.current_stream()
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            side_work()
        main()
        cur.wait_stream(side)

    return call


def report(tag: str, main, side_work) -> None:
    side = torch.cuda.Stream()
    t_main = time_gpu(main).ms
    t_side = time_gpu(side_work).ms
    t_ser = time_gpu(lambda: (main(), side_work())).ms
    t_ovl = time_gpu(forked(main, side_work, side)).ms
    hidden = (t_ser - t_ovl) / t_side if t_side > 0 else float("nan")
    print(
        f"{tag:58s} main {t_main:7.3f}  side {t_side:6.3f}  serial {t_ser:7.3f}  forked {t_ovl:7.3f}  hidden {hidden:5.0%}",
        flush=True,
    )


def shape(d: int, n: int, nb: int, heads: int) -> None:
    f, t = 4 * d, n * nb
    print(f"\n== d={d} f={f} n={n} N={nb} (T={t})", flush=True)
    cfg = GPT2Config(d_model=d, n_layer=1, n_head=heads, vocab_size=256, seq_len=n)
    blk = GPT2Block(cfg).to(dev)
    x = torch.randn(nb, n, d, device=dev)
    x2d = torch.randn(t, d, device=dev, dtype=BF)
    dy = torch.randn(t, d, device=dev, dtype=BF)
    h = torch.randn(t, f, device=dev, dtype=BF)
    w1, m1, p1, r1 = pair_for(f, d)
    w2, m2, p2, r2 = pair_for(d, f)
    seed = mvue24_seed_tensor(dev)

    def attn_half() -> None:  # ln_1 + qkv + attention + proj (forward), as the block runs it
        with torch.no_grad(), torch.autocast("cuda", dtype=BF, cache_enabled=False):
            blk.attn(blk.ln_1(x))

    def repack_both() -> None:
        refresh_pair_operands(w1, m1, p1, values_only=True, pruned=r1)
        refresh_pair_operands(w2, m2, p2, values_only=True, pruned=r2)

    def repack_fc2() -> None:
        refresh_pair_operands(w2, m2, p2, values_only=True, pruned=r2)

    def fc_fwd() -> None:  # the fst fc GEMM: (W1*M1) [f, d] @ X^T [d, T]
        cslt_mm_packed(p1[0], (f, d), x2d.t(), transpose_result=True)

    def proj_dx() -> None:  # proj's input gradient: (W2*M2)^T [f, d] @ dY^T [d, T]
        cslt_mm_packed(p2[1], (f, d), dy.t(), transpose_result=True)

    def mvue_dy() -> None:
        pack_mvue_t_operand(dy, seed)

    def dense_gemm() -> None:
        h @ w1.to(BF)

    report("attention half fwd || repack fc+proj", attn_half, repack_both)
    report("fst fc GEMM fwd || repack proj", fc_fwd, repack_fc2)
    report("fst proj dX GEMM || MVUE pack dY", proj_dx, mvue_dy)
    report("dense GEMM [T,f]x[f,d] || MVUE pack dY", dense_gemm, mvue_dy)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    shape(2048, 2048, 8, 16)
    shape(2048, 1024, 8, 16)
    shape(1280, 1024, 23, 20)
