"""GPU probe (device tool): how much of a GPT-2 block's fwd+bwd is attention, and whether another
SDPA backend than torch's default would make the blocks of figure6 faster (head_dim 64, causal,
bf16). For each shape: SDPA fwd+bwd alone per backend (checked against the float32 math backend),
then figure6's block measurement (dense, fst, half, GEMM-level ceiling) with each backend first in
priority. Last, whether cuDNN's backward stays right when the layout of dO changes between two
calls with the same q/k/v/O layouts (torch 2.11 + cuDNN 9.19 on an H100: it does not).
    usage: PYTHONPATH=. python3 scripts/probes/gpu_probe_attention.py [d:n:N ...]   (default below)"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from scripts.probes.gpu_probe_ffn import _Ctx
from suites import figure6

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
ALL = list(BACKENDS.values()) + [SDPBackend.MATH]


def _first(b: SDPBackend):
    """``b`` first, the others after it (a float32 twin falls through to a backend that takes it)."""
    return sdpa_kernel([b] + [o for o in ALL if o != b], set_priority=True)


def _attention(ctx: _Ctx, d: int, n: int, batch: int) -> None:
    h, hd = d // 64, 64
    gen = torch.Generator(device="cuda").manual_seed(0)
    qkv = torch.randn(batch, n, 3 * d, device="cuda", dtype=torch.bfloat16, generator=gen)
    # dO as the block hands it over (the gradient of y.transpose(1, 2).reshape(b, t, d)): BSHD strides
    dy = torch.randn(batch, n, d, device="cuda", dtype=torch.bfloat16, generator=gen).view(batch, n, h, hd)
    dy = dy.transpose(1, 2)

    def views(t: torch.Tensor):
        return [z.view(batch, n, h, hd).transpose(1, 2) for z in t.split(d, dim=-1)]

    ref_in = qkv.float().requires_grad_(True)
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(*views(ref_in), is_causal=True)
    ref.backward(dy.float())
    flops = 3.5 * 2 * batch * h * n * n * hd  # causal: fwd 2 * (2 n^2 hd) / 2; bwd 2.5x fwd
    for name, b in BACKENDS.items():
        x = qkv.clone().requires_grad_(True)

        def call(x: torch.Tensor = x, b: SDPBackend = b) -> None:
            x.grad = None
            with sdpa_kernel([b]):
                y = F.scaled_dot_product_attention(*views(x), is_causal=True)
            y.backward(dy)

        try:
            call()
        except RuntimeError as e:
            print(f"   attention {name}: not available ({str(e).splitlines()[0][:120]})", flush=True)
            continue
        # errors from a separate leaf: an autograd graph kept alive over x would break the capture
        x2 = qkv.clone().requires_grad_(True)
        with sdpa_kernel([b]):
            y = F.scaled_dot_product_attention(*views(x2), is_causal=True)
        y.backward(dy)
        e_out = ((y.float() - ref).norm() / ref.norm()).item()
        e_dx = ((x2.grad.float() - ref_in.grad).norm() / ref_in.grad.norm()).item()
        del y, x2
        t = ctx.time(call)
        print(
            f"   attention d={d} n={n} N={batch} {name:9s}: {t.ms:7.3f} ms fwd+bwd, "
            f"{flops / t.ms / 1e9:6.1f} TFLOP/s; rel err out {e_out:.1e}, dqkv {e_dx:.1e} ({t.timer})",
            flush=True,
        )


def _stale_plan_check() -> None:
    """cuDNN attention, one q/k/v layout, dO first in O's layout and then contiguous (BHSD): is the
    second backward right? (Run last: it leaves a plan for the BHSD dO behind.)"""
    batch, n, d, h = 2, 1024, 1024, 16
    gen = torch.Generator(device="cuda").manual_seed(1)
    qkv = torch.randn(batch, n, 3 * d, device="cuda", dtype=torch.bfloat16, generator=gen)
    g = torch.randn(batch, n, d, device="cuda", dtype=torch.bfloat16, generator=gen).view(batch, n, h, 64)

    def grad(x: torch.Tensor, b: SDPBackend, do: torch.Tensor) -> torch.Tensor:
        x = x.detach().clone().requires_grad_(True)
        with sdpa_kernel([b]):
            y = F.scaled_dot_product_attention(
                *[z.view(batch, n, h, 64).transpose(1, 2) for z in x.split(d, -1)], is_causal=True
            )
        y.backward(do)
        return x.grad.float()

    for name, do in (("O's layout (BSHD)", g.transpose(1, 2)), ("contiguous (BHSD)", g.transpose(1, 2).contiguous())):
        ref = grad(qkv.float(), SDPBackend.MATH, do.float())
        err = ((grad(qkv, SDPBackend.CUDNN_ATTENTION, do) - ref).norm() / ref.norm()).item()
        print(
            f"   cuDNN backward, dO {name}, same q/k/v/O layout as the call before: rel err dqkv {err:.1e}", flush=True
        )


def main() -> None:
    args = sys.argv[1:] or ["2048:2048:4", "4096:2048:4", "2048:1024:8", "4096:512:4", "1280:1024:8"]
    ctx = _Ctx()
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}", flush=True)
    for a in args:
        d, n, batch = (int(v) for v in a.split(":"))
        _attention(ctx, d, n, batch)
        for name, b in BACKENDS.items():
            print(f"-- block with {name} first", flush=True)
            try:
                with _first(b):
                    figure6._measure(ctx, "block", figure6._cfg(d, n), batch, n, ("fst", "half"))
            except RuntimeError as e:
                print(f"   block {name}: failed ({str(e).splitlines()[0][:120]})", flush=True)
            torch.cuda.empty_cache()
    print("-- cuDNN plan reuse across dO layouts", flush=True)
    _stale_plan_check()


if __name__ == "__main__":
    main()
